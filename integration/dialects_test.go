package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/coder/websocket"
)

// withoutDelivery is the event with its top-level delivery member removed,
// re-encoded with sorted keys, so that a stored or delivered event can be
// compared with the line it came from.
func withoutDelivery(t *testing.T, event []byte) (string, json.RawMessage) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(event, &m); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, event)
	}
	d := m["delivery"]
	delete(m, "delivery")
	b, _ := json.Marshal(m)
	return string(b), d
}

// Every event of dialect D's conformance fixtures (the seven files of
// axisrobo/aep conformance/fixtures at 08ad33e, vendored in aep/testdata),
// including the 11 that carry an upstream hop's delivery object, is accepted
// through the binary and delivered to a types=* stream, each with this
// gateway's own delivery stamp in place of the upstream one.
func TestConformanceDThroughTheBinary(t *testing.T) {
	files, err := filepath.Glob("../aep/testdata/d-*.ndjson")
	if err != nil || len(files) != 7 {
		t.Fatalf("fixtures: %v %v", files, err)
	}
	var body strings.Builder
	want := map[string]int{}
	n, upstream := 0, 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.TrimSpace(line) == "" {
				continue
			}
			body.WriteString(line + "\n")
			key, d := withoutDelivery(t, []byte(line))
			want[key]++
			n++
			if d != nil {
				upstream++
			}
		}
	}
	if n != 41 || upstream != 11 {
		t.Fatalf("%d fixture events, %d with delivery; want 41 and 11", n, upstream)
	}

	g := startGateway(t, rArgs(t)...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/aep/events?types=*", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", err, resp)
	}
	defer resp.Body.Close()
	res, err := g.post(ctx, "/aep/events", "application/x-ndjson", nil, body.String())
	if err != nil || res.status != 202 || !strings.Contains(string(res.body), `"accepted":41`) {
		t.Fatalf("ingest: %v %d %s", err, res.status, res.body)
	}
	for i, m := range readSSE(ctx, t, resp, n) {
		key, d := withoutDelivery(t, []byte(m.data))
		if want[key] == 0 {
			t.Errorf("message %d was not sent (or came twice): %s", i, m.data)
		}
		want[key]--
		var stamp struct {
			Mode     string `json:"mode"`
			Sequence int    `json:"sequence"`
			Cursor   string `json:"cursor"`
		}
		if err := json.Unmarshal(d, &stamp); err != nil || stamp.Mode != "best_effort" || stamp.Sequence != i+1 ||
			stamp.Cursor == "" || stamp.Cursor != m.id || strings.HasPrefix(stamp.Cursor, "stream_01") {
			t.Errorf("message %d: delivery %s (SSE id %q), want this gateway's stamp", i, d, m.id)
		}
		if c := strings.Count(m.data, `"delivery":`); c != 1 {
			t.Errorf("message %d has %d delivery members: %s", i, c, m.data)
		}
	}
	g.stop()
}

// Seed 000: a dialect D subscription must name at least one of types,
// source, target or topic. A session-only filter is refused on every binding
// (SSE, WebSocket, durable API) with subscription_rejected and a message
// that suggests types=*.
func TestSessionOnlySubscriptionRefusedThroughTheBinary(t *testing.T) {
	g := startGateway(t, rArgs(t)...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	refused := func(binding string, status, wantStatus int, body []byte) {
		t.Helper()
		if status != wantStatus || !strings.Contains(string(body), "subscription_rejected") || !strings.Contains(string(body), "types=*") {
			t.Errorf("%s: status %d %s, want %d subscription_rejected suggesting types=*", binding, status, body, wantStatus)
		}
	}

	for _, q := range []string{"session_id=sess_01", "conversation_id=c&task_id=t"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/aep/events?"+q, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		refused("SSE "+q, resp.StatusCode, http.StatusBadRequest, body)
	}

	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+"/aep/subscriptions",
		strings.NewReader(`{"type":"subscription.requested","payload":{"session_id":"sess_01","delivery_mode":"at_least_once"}}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	refused("durable API", resp.StatusCode, http.StatusBadRequest, body)

	w := gatewaytest.DialWSD(t, gatewaytest.WSURL(g.URL, "/aep"), gatewaytest.WSOptions{})
	m := w.Subscribe("evt_sub", `{"session_id":"sess_01"}`)
	if m.Type != "subscription.rejected" {
		t.Errorf("WebSocket: %s, want subscription.rejected", m.Raw)
	}
	refused("WebSocket", http.StatusOK, http.StatusOK, m.Raw)
	_ = w.C.Close(websocket.StatusNormalClosure, "")
	g.stop()
}

// The R conformance corpus through the binary with --validate-payloads: the
// 64 golden events are accepted, each of the 25 single-event invalid cases
// is refused with 400 invalid-event (the 8 payload-schema ones on a data
// field). Without the flag a payload-schema case is accepted.
func TestValidatePayloadsThroughTheBinary(t *testing.T) {
	golden, err := os.ReadFile("../aep/testdata/r-golden.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../aep/testdata/r-invalid-cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []struct {
			Name  string          `json:"name"`
			Event json.RawMessage `json:"event"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	args := rArgs(t)
	g := startGateway(t, append(args, "--validate-payloads")...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hdr := map[string]string{"AEP-Version": "0.1"}
	res, err := g.post(ctx, "/events", "application/x-ndjson", hdr, string(golden))
	if err != nil || res.status != 202 || !strings.Contains(string(res.body), `"accepted":64`) {
		t.Fatalf("golden: %v %d %s", err, res.status, res.body)
	}
	single, onData := 0, 0
	var payloadCase string
	for _, c := range doc.Cases {
		if c.Event == nil {
			continue // stream cases: cross-event rules
		}
		single++
		res, err := g.post(ctx, "/events", "application/json", hdr, string(c.Event))
		var body struct{ Error, Field string }
		if err != nil || res.status != 400 || json.Unmarshal(res.body, &body) != nil || body.Error != "invalid-event" {
			t.Errorf("%s: %v %d %s, want 400 invalid-event", c.Name, err, res.status, res.body)
			continue
		}
		if strings.HasPrefix(body.Field, "data.") {
			onData++
			payloadCase = string(c.Event)
		}
	}
	if single != 25 || onData != 8 {
		t.Errorf("%d single-event cases, %d refused on a data field; want 25 and 8", single, onData)
	}
	// The same on the /socket emitter path: an in-band error naming the event.
	var ev struct{ ID string }
	_ = json.Unmarshal([]byte(payloadCase), &ev)
	w := gatewaytest.DialWSR(t, gatewaytest.WSURL(g.URL, "/socket"), `{"type":"hello","versions":["0.1"],"role":"emitter","identity":{"agent":"it"}}`, gatewaytest.WSOptions{})
	w.Send(payloadCase)
	if f := w.Next(); f.Str("type") != "error" || f.Str("code") != "invalid-event" || f.Str("event") != ev.ID {
		t.Errorf("socket emitter: hello then %v, want invalid-event for %s", f, ev.ID)
	}
	_ = w.C.Close(websocket.StatusNormalClosure, "")
	g.stop()

	plain := startGateway(t, args...)
	if res, err := plain.post(ctx, "/events", "application/json", hdr, payloadCase); err != nil || res.status != 202 {
		t.Errorf("without --validate-payloads: %v %d %s", err, res.status, res.body)
	}
	plain.stop()
}
