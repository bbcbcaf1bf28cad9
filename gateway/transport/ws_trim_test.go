package transport_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/internal/queue"
)

// A parked connection's outbound ring is given back at a heartbeat that
// finds it empty, and made again for what comes next: a message a pump
// queues while the connection is parked and trimmed is written, the reader
// still answers, and a client that closes while the connection is parked
// and trimmed ends it once.
func TestParkedConnTrimsOutboundAndRefills(t *testing.T) {
	hub := transport.NewHub(0)
	conns := make(chan *transport.Conn, 1)
	feeds := make(chan *queue.Queue[string], 1)
	var ended atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stream, err := hub.Enter("t", nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		ws, err := transport.Upgrade(w, r, transport.UpgradeOptions{})
		if err != nil {
			stream.Leave()
			return
		}
		c := transport.NewConn(ws, transport.WSConfig{
			HandshakeTimeout: 5 * time.Second,
			Heartbeat:        transport.Heartbeat{Every: 20 * time.Millisecond}, // protocol pings
			Stream:           stream,
			Ended:            func() { ended.Add(1); stream.Leave() },
		})
		q := queue.New[string](4)
		transport.Pump(c, q, func(s string) bool { return c.Send([]byte("fed:" + s)) }, func(bool) {})
		conns <- c
		feeds <- q
		c.Serve(func(_ websocket.MessageType, data []byte) bool {
			c.Ready()
			c.StartHeartbeat()
			return c.Send([]byte("echo:" + string(data)))
		}, q.End)
	}))
	t.Cleanup(hs.Close)
	t.Cleanup(func() { _ = hub.Shutdown(context.Background()) })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl := dial(t, "ws"+strings.TrimPrefix(hs.URL, "http"))
	c, q := <-conns, <-feeds
	// The client reads on its own goroutine: that answers the pings.
	got := make(chan string, 16)
	go func() {
		defer close(got)
		for {
			_, b, err := cl.Read(ctx)
			if err != nil {
				return
			}
			got <- string(b)
		}
	}()
	expect := func(want string) {
		t.Helper()
		select {
		case s := <-got:
			if s != want {
				t.Fatalf("read %q, want %q", s, want)
			}
		case <-ctx.Done():
			t.Fatalf("no %q", want)
		}
	}
	if err := cl.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	expect("echo:hi")
	waitUntil(t, "the ring trimmed by a heartbeat", func() bool { return c.OutAllocated() == 0 })

	// Queued while parked and trimmed: the ring is made again and written.
	if !q.Offer("x") {
		t.Fatal("feed refused")
	}
	expect("fed:x")
	if err := cl.Write(ctx, websocket.MessageText, []byte("again")); err != nil {
		t.Fatal(err)
	}
	expect("echo:again")
	waitUntil(t, "the ring trimmed again", func() bool { return c.OutAllocated() == 0 })
	if ended.Load() != 0 {
		t.Fatal("ended while the client is there (pings unanswered?)")
	}

	// The client leaves while the connection is parked and trimmed.
	_ = cl.Close(websocket.StatusNormalClosure, "bye")
	waitUntil(t, "the connection's end", func() bool { return ended.Load() == 1 })
	time.Sleep(100 * time.Millisecond) // a second end would show here
	if n := ended.Load(); n != 1 {
		t.Fatalf("ended %d times", n)
	}
}
