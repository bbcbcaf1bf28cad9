package transport_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// BenchmarkConnBurst: a burst of 100 messages of 300 B queued at once on
// one Conn over a real socket, read by a coder/websocket client in the
// same process (its reads are in the figures too). ns/msg and allocs/msg
// are per message of the burst.
func BenchmarkConnBurst(b *testing.B) {
	const burst = 100
	msg := make([]byte, 300)
	for i := range msg {
		msg[i] = 'a' + byte(i%26)
	}
	url, _ := wsServer(b, transport.WSConfig{}, func(c *transport.Conn) func(websocket.MessageType, []byte) bool {
		return func(_ websocket.MessageType, data []byte) bool {
			n, _ := strconv.Atoi(string(data))
			for range n {
				if !c.Send(msg) {
					return false
				}
			}
			return true
		}
	})
	cl := dial(b, url)
	ctx := context.Background()
	req := []byte(strconv.Itoa(burst))
	b.ReportAllocs()
	for b.Loop() {
		if err := cl.Write(ctx, websocket.MessageText, req); err != nil {
			b.Fatal(err)
		}
		for range burst {
			if _, _, err := cl.Read(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*burst), "ns/msg")
}

// BenchmarkEchoRoundTrip: one message to the server and its echo back,
// over a real socket, with the connection parked between messages (a
// wake-up through the Hub's poller, a dispatcher and a reader goroutine
// for each message) or served by its goroutine (parking off): the cost
// parking adds to a message, as a ratio of the two in one run.
func BenchmarkEchoRoundTrip(b *testing.B) {
	for _, park := range []bool{false, true} {
		name := "goroutine"
		if park {
			name = "parked"
		}
		b.Run(name, func(b *testing.B) {
			hub := transport.NewHub(0)
			hub.SetParking(park)
			url := echoHubServer(b, hub)
			cl := dial(b, url)
			ctx := context.Background()
			msg := []byte("ping")
			b.ReportAllocs()
			for b.Loop() {
				if err := cl.Write(ctx, websocket.MessageText, msg); err != nil {
					b.Fatal(err)
				}
				if _, _, err := cl.Read(ctx); err != nil {
					b.Fatal(err)
				}
			}
			if park && hub.ParkedWebSockets() != 1 {
				b.Fatalf("%d connections parked, want 1", hub.ParkedWebSockets())
			}
		})
	}
}

// echoHubServer serves echoing connections admitted by hub (Ready at
// once, so that they park when hub parks).
func echoHubServer(tb testing.TB, hub *transport.Hub) string {
	tb.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stream, err := hub.Enter("t", nil)
		if err != nil {
			return
		}
		ws, err := transport.Upgrade(w, r, transport.UpgradeOptions{})
		if err != nil {
			stream.Leave()
			return
		}
		c := transport.NewConn(ws, transport.WSConfig{Stream: stream, Ended: stream.Leave})
		stream.OnShutdown(func() { c.CloseNow(websocket.StatusGoingAway, "shutdown") })
		c.Ready()
		c.Serve(func(_ websocket.MessageType, data []byte) bool { return c.Send(data) }, nil)
	}))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hub.Shutdown(ctx)
		hs.Close()
	})
	return "ws" + strings.TrimPrefix(hs.URL, "http")
}
