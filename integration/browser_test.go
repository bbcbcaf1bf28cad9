package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// What a browser does, through the binary: a page of an allowed origin
// gets CORS answers on the HTTP routes and opens the WebSocket; a page of
// another origin is refused on both. WebSocket publishing is held to
// --rate-limit like HTTP ingest.
func TestBrowserOriginsAndWebSocketRateLimit(t *testing.T) {
	const allowed, foreign = "https://app.example.com", "https://evil.example"
	g := startGateway(t, "--data-dir", t.TempDir(), "--embedded-kafka-listen", "127.0.0.1:0", "--topic-partitions", "2",
		"--cors-allowed-origins", allowed, "--rate-limit", "1", "--rate-burst", "3")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	do := func(method, path string, hdr map[string]string) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, method, g.URL+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	resp := do(http.MethodOptions, "/aep/events", map[string]string{"Origin": allowed, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"})
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != allowed {
		t.Fatalf("preflight from %s: %d %v", allowed, resp.StatusCode, resp.Header)
	}
	resp = do(http.MethodOptions, "/aep/events", map[string]string{"Origin": foreign, "Access-Control-Request-Method": "POST"})
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight from %s: %d %v", foreign, resp.StatusCode, resp.Header)
	}
	// EventSource: an SSE stream readable by the allowed origin.
	resp = do(http.MethodGet, "/aep/events?types=*", map[string]string{"Origin": allowed})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != allowed ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("SSE from %s: %d %v", allowed, resp.StatusCode, resp.Header)
	}
	resp.Body.Close()
	resp = do(http.MethodGet, "/aep/events?types=*", map[string]string{"Origin": foreign})
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("SSE from %s: %d", foreign, resp.StatusCode)
	}

	wsURL := gatewaytest.WSURL(g.URL, "/aep")
	originOf := func(origin string) gatewaytest.WSOptions {
		return gatewaytest.WSOptions{Subprotocols: []string{gatewaytest.SubprotocolD}, Header: http.Header{"Origin": []string{origin}}}
	}
	if c, resp, err := gatewaytest.TryDialWS(wsURL, originOf(foreign)); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		if c != nil {
			c.CloseNow()
		}
		t.Fatalf("WebSocket from %s: %v %v", foreign, resp, err)
	}
	w := gatewaytest.DialWSD(t, wsURL, originOf(allowed))

	// 10 events at once against a burst of 3 and 1 event/s.
	const sent = 10
	for i := range sent {
		w.Send(dEvent(i, "sess_b"))
	}
	acked, limited := 0, 0
	for range sent {
		m := w.Next()
		switch m.Type {
		case "event.acknowledged":
			acked++
		case "event.rejected":
			e, _ := m.Payload["error"].(map[string]any)
			if e["code"] != "protocol_error" || e["retryable"] != true || !strings.Contains(fmt.Sprint(e["message"]), "rate limit") {
				t.Fatalf("rejected event: %s", m.Raw)
			}
			limited++
		default:
			t.Fatalf("unexpected frame: %s", m.Raw)
		}
	}
	t.Logf("WebSocket publishing, %d events at once, burst 3, 1/s: %d acknowledged, %d rate-limited", sent, acked, limited)
	if acked < 3 || acked > 4 || limited != sent-acked {
		t.Fatalf("%d acknowledged, %d rate-limited of %d", acked, limited, sent)
	}
}
