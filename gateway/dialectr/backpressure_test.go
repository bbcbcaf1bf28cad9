package dialectr_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aep-gateway/aep-gateway/gateway/dialectr"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// With one-slot queues every stream is permanently slow: the engine moves
// the subscriptions back to reading Kafka again and again. Every event of
// every severity still arrives, in order, once (AEP-0003 §8.4: notice and
// above are delivered or the stream ends; nothing is dropped here at all).
func TestSlowConsumersLoseNothing(t *testing.T) {
	e := newEnv(t, func(c *dialectr.Config) { c.Queue = 1; c.Outbound = 1 })
	sse := e.getSSE(url.Values{"filter": {`{"session":["s-slow"]}`}}, nil)
	w := e.dialWS(gatewaytest.RConsumerHello)
	w.Subscribe("slow", `"filter":{"session":["s-slow"]}`)
	const n = 300
	var want []string
	for b := 0; b < n/50; b++ {
		var batch []string
		for i := range 50 {
			batch = append(batch, rEvent(fmt.Sprintf("slow-%d", b*50+i), "s-slow", 0, b*50+i))
		}
		want = append(want, batch...)
		e.post(batch...)
	}
	for i, ev := range want {
		if m := sse.nextEvent(); m.Data != ev {
			t.Fatalf("SSE event %d: got %q, want %q", i, m.Data, ev)
		}
	}
	for i, ev := range want {
		if b := w.NextFrame(); string(b) != ev {
			t.Fatalf("WS event %d: got %s, want %s", i, b, ev)
		}
	}
}

// A single event POSTed as pretty-printed application/json is stored as
// received and goes out on one data: line.
func TestSSEPrettyPrintedEventOnOneLine(t *testing.T) {
	e := newEnv(t, nil)
	c := e.getSSE(nil, nil)
	pretty := "{\n  \"aep\": \"0.1\",\n  \"id\": \"pp-1\",\n  \"type\": \"tool.requested\",\n  \"time\": \"2026-07-03T10:14:00.000Z\",\n  \"source\": \"aep://h/agent/a\",\n  \"agent\": \"a\",\n  \"session\": \"s-pp\",\n  \"seq\": 0\n}"
	req, _ := http.NewRequest(http.MethodPost, e.url+"/events", strings.NewReader(pretty))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("AEP-Version", "0.1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("ingest: %d %s", resp.StatusCode, b)
	}
	m := c.nextEvent()
	if want := strings.ReplaceAll(pretty, "\n", " "); m.Data != want || m.ID != "s-pp:0:0" {
		t.Fatalf("got %+v, want data %q", m, want)
	}
}

// Close ends SSE streams with a closing comment and refuses new ones.
func TestSSECloseEndsStreams(t *testing.T) {
	e := newEnv(t, nil)
	c := e.getSSE(nil, nil)
	_ = e.relay.Shutdown(context.Background())
	for {
		m := c.Next()
		if m.Comment() == "ping" {
			continue
		}
		if !strings.HasPrefix(m.Comment(), "closing") {
			t.Fatalf("got %+v, want the closing comment", m)
		}
		break
	}
	resp, cancel := e.rawSSE(nil, nil)
	defer cancel()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("after Close: %d, want 503", resp.StatusCode)
	}
}

// MaxStreamsPerTenant bounds SSE streams and WebSocket connections
// together; a closed one frees its slot.
func TestStreamsPerTenantBounded(t *testing.T) {
	e := newEnv(t, func(c *dialectr.Config) { c.MaxStreamsPerTenant = 2 })
	first := e.getSSE(nil, nil)
	e.dialWS(gatewaytest.RConsumerHello)
	resp, cancel := e.rawSSE(nil, nil)
	b, _ := io.ReadAll(resp.Body)
	cancel()
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), `"limit-exceeded"`) {
		t.Fatalf("third stream: %d %s", resp.StatusCode, b)
	}
	first.Close()
	// The server notices the client left, then frees the slot.
	gatewaytest.Poll(t, "the closed stream's slot to be freed", func() bool {
		resp, cancel := e.rawSSE(nil, nil)
		status := resp.StatusCode
		cancel()
		if status != http.StatusOK && status != http.StatusTooManyRequests {
			t.Fatalf("status %d", status)
		}
		return status == http.StatusOK
	})
}
