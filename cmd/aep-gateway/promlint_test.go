package main

import (
	"context"
	"time"

	"github.com/coder/websocket"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/aep-gateway/aep-gateway/gateway/dialectd"
)

// The /metrics page passes Prometheus' own metric lint (what `promtool check
// metrics` runs): gauges without _total, counters with it, base units.
func TestMetricsPagePassesPromlint(t *testing.T) {
	base := startGateway(t)
	// Something of every kind on the page: an accepted event, a stream.
	resp := do(t, http.MethodPost, base+"/events", "application/json",
		`{"aep_version":"0.1","id":"01J00000000000000000000001","type":"run.started","source":"agent://lint","session_id":"s1","time":"2026-01-01T00:00:00Z","data":{}}`)
	resp.Body.Close()
	_, page := exportedNames(t, base)
	problems, err := promlint.New(strings.NewReader(page)).Lint()
	if err != nil {
		t.Fatalf("lint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// A WebSocket stream is counted with the status that went on the wire, 101,
// also when it parked (counted when it ends).
func TestWebSocketUpgradesCountedAs101(t *testing.T) {
	base := startGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var conns []*websocket.Conn
	for _, c := range []struct{ path, hello string }{
		{"/aep", `{"aep_version":"0.1","id":"evt_o","type":"session.opened","source":"agent:a","created_at":"2026-07-09T10:00:00Z","payload":{"session_id":"s","version":"0.1"}}`},
		{"/socket", `{"type":"hello","versions":["0.1"],"role":"consumer","identity":{"agent":"lint"}}`},
	} {
		ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+c.path, &websocket.DialOptions{Subprotocols: []string{dialectd.WSSubprotocol}})
		if err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		defer ws.CloseNow()
		if err := ws.Write(ctx, websocket.MessageText, []byte(c.hello)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ws.Read(ctx); err != nil { // the session's answer
			t.Fatalf("%s: %v", c.path, err)
		}
		conns = append(conns, ws)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, page := exportedNames(t, base); strings.Contains(page, "\naep_websocket_parked_connections 2\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the idle connections did not park")
		}
	}
	for _, c := range conns {
		c.Close(websocket.StatusNormalClosure, "")
	}
	want := []string{`aep_http_requests_total{code="101",method="GET",route="/aep"} 1`, `aep_http_requests_total{code="101",method="GET",route="/socket"} 1`}
	var page string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		_, page = exportedNames(t, base)
		if strings.Contains(page, want[0]) && strings.Contains(page, want[1]) {
			return
		}
	}
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, "aep_http_requests_total") {
			t.Log(line)
		}
	}
	t.Fatalf("want %q", want)
}
