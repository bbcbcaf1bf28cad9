package transport_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aep-gateway/aep-gateway/gateway/connlimit"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/internal/queue"
)

// wsParkServer serves connections admitted by hub that become Ready on
// their first message and then echo; each connection's Serve returning
// (parked, or ended) and its Ended are counted. feed, when set, gets each
// connection's pump queue: what is offered there is written.
type wsParkServer struct {
	url            string
	handler        http.Handler
	hub            *transport.Hub
	served, ended  atomic.Int64
	feeds          chan *queue.Queue[string]
	pumpEnds       atomic.Int64
	pumpEndedQueue atomic.Int64
	// The OnPark hooks a measuring middleware would register: parks
	// counts their calls, hookEnds their ends, hookBytes the bytes the
	// ends were told.
	parks, hookEnds, hookBytes atomic.Int64
}

func newWSParkServer(t *testing.T) *wsParkServer {
	t.Helper()
	ps := &wsParkServer{hub: transport.NewHub(0), feeds: make(chan *queue.Queue[string], 100)}
	ps.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(transport.OnPark(r.Context(), func() func(int64) {
			ps.parks.Add(1)
			return func(n int64) { ps.hookEnds.Add(1); ps.hookBytes.Add(n) }
		}))
		stream, err := ps.hub.Enter("t", nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		ws, err := transport.Upgrade(w, r, transport.UpgradeOptions{})
		if err != nil {
			stream.Leave()
			return
		}
		var c *transport.Conn
		q := queue.New[string](16)
		c = transport.NewConn(ws, transport.WSConfig{
			// Bounded until Ready, which the first message makes: the
			// connection parks right after it.
			HandshakeTimeout: 5 * time.Second,
			Stream:           stream,
			Ended:            func() { ps.ended.Add(1); stream.Leave() },
		})
		stream.OnShutdown(func() { c.CloseAfter(nil, websocket.StatusGoingAway, "shutdown") })
		transport.Pump(c, q, func(s string) bool { return c.Send([]byte("fed:" + s)) }, func(ended bool) {
			ps.pumpEnds.Add(1)
			if ended {
				ps.pumpEndedQueue.Add(1)
			}
		})
		ps.feeds <- q
		c.Serve(func(_ websocket.MessageType, data []byte) bool {
			c.Ready()
			if string(data) == "bye" {
				c.Close(websocket.StatusNormalClosure, "bye")
				return false
			}
			return c.Send([]byte("echo:" + string(data)))
		}, q.End)
		ps.served.Add(1)
	})
	hs := httptest.NewServer(ps.handler)
	t.Cleanup(hs.Close)
	ps.url = "ws" + strings.TrimPrefix(hs.URL, "http")
	return ps
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A Ready connection parks: Serve returns while the connection lives on,
// it still reads (a reader per message), writes what a pump feeds it (a
// writer while there is something to write), and its close ends it once,
// Ended and the pump's end included. Idle parked connections hold no
// goroutine.
func TestParkedConnReadsWritesAndEndsOnce(t *testing.T) {
	ps := newWSParkServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := runtime.NumGoroutine()
	const n = 20
	cls := make([]*websocket.Conn, n)
	feeds := make([]*queue.Queue[string], n)
	for i := range cls {
		cl := dial(t, ps.url)
		cls[i], feeds[i] = cl, <-ps.feeds
		if err := cl.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
			t.Fatal(err)
		}
		if _, b, err := cl.Read(ctx); err != nil || string(b) != "echo:hi" {
			t.Fatalf("read %q, %v", b, err)
		}
	}
	waitUntil(t, "every Serve to return (parked)", func() bool { return ps.served.Load() == n })
	// The clients' own goroutines (coder/websocket: none while not
	// reading) and the poller's are what is left: not one per connection.
	waitUntil(t, "the parked connections' goroutines to leave", func() bool { return runtime.NumGoroutine()-before < n })
	if got := ps.hub.ParkedWebSockets(); got != n {
		t.Fatalf("ParkedWebSockets = %d, want %d", got, n)
	}
	for i, cl := range cls {
		feeds[i].Offer("x")
		if _, b, err := cl.Read(ctx); err != nil || string(b) != "fed:x" {
			t.Fatalf("read %q, %v", b, err)
		}
		if err := cl.Write(ctx, websocket.MessageText, []byte("again")); err != nil {
			t.Fatal(err)
		}
		if _, b, err := cl.Read(ctx); err != nil || string(b) != "echo:again" {
			t.Fatalf("read %q, %v", b, err)
		}
	}
	if ps.ended.Load() != 0 {
		t.Fatalf("%d connections ended early", ps.ended.Load())
	}
	if err := cls[0].Write(ctx, websocket.MessageText, []byte("bye")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cls[0].Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("after bye: %v, want close 1000", err)
	}
	waitUntil(t, "the closed connection's end", func() bool { return ps.ended.Load() == 1 && ps.pumpEnds.Load() == 1 })
	_ = cls[1].CloseNow() // the peer leaves without a close
	waitUntil(t, "the left connection's end", func() bool {
		return ps.ended.Load() == 2 && ps.pumpEnds.Load() == 2 && ps.hookEnds.Load() == 2
	})
	if got := ps.hub.ParkedWebSockets(); got != n-2 {
		t.Fatalf("ParkedWebSockets = %d after two ended, want %d", got, n-2)
	}
	if ps.pumpEndedQueue.Load() != 2 {
		t.Fatalf("%d pumps saw their queue end, want 2", ps.pumpEndedQueue.Load())
	}
	// Every connection parked once; the two that ended told their
	// middleware's end, with what was written after the handshake
	// ("echo:hi", "fed:x", "echo:again" and a close frame: at least 30 B each).
	if ps.parks.Load() != n || ps.hookEnds.Load() != 2 || ps.hookBytes.Load() < 2*30 {
		t.Fatalf("OnPark hooks: %d parks (want %d), %d ends (want 2), %d bytes", ps.parks.Load(), n, ps.hookEnds.Load(), ps.hookBytes.Load())
	}
}

// Frames a client sends together are each handled, in order, by a parked
// connection (its reader reads ahead and handles what came without going
// back to the poller), whether they come in one write or in pieces that cut
// headers and payloads anywhere, around the read-ahead's size too.
func TestParkedConnHandlesFramesThatCameTogether(t *testing.T) {
	ps := newWSParkServer(t)
	c, _ := dialRaw(t, strings.TrimPrefix(ps.url, "ws://"), "")
	c.frame(true, 0x1, []byte("hi"), true)
	c.wantFrame(0x1, "echo:hi")
	waitUntil(t, "Serve to return (parked)", func() bool { return ps.served.Load() == 1 })
	var stream []byte
	var want []string
	for i, n := range []int{1, 10, 125, 126, 300, 4090, 4095, 4096, 4097, 5000, 2, 20_000, 3} {
		p := strings.Repeat(string(rune('a'+i)), n)
		stream = appendFrame(stream, true, 0x1, []byte(p), true)
		want = append(want, "echo:"+p)
	}
	for _, chunk := range []int{len(stream), 1, 7, 4096, 4099} {
		errs := make(chan error, 1)
		go func() { // the echoes are read meanwhile: the server may wait for room
			for rest := stream; len(rest) > 0; {
				k := min(chunk, len(rest))
				if _, err := c.nc.Write(rest[:k]); err != nil {
					errs <- err
					return
				}
				rest = rest[k:]
			}
			errs <- nil
		}()
		for _, w := range want {
			c.wantFrame(0x1, w)
		}
		if err := <-errs; err != nil {
			t.Fatalf("chunks of %d: %v", chunk, err)
		}
	}
	if ps.ended.Load() != 0 {
		t.Fatal("the connection ended")
	}
}

// The Hub's Shutdown ends parked connections with their last words and
// waits for them.
func TestHubShutdownEndsParkedConns(t *testing.T) {
	ps := newWSParkServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const n = 5
	cls := make([]*websocket.Conn, n)
	for i := range cls {
		cls[i] = dial(t, ps.url)
		<-ps.feeds
		if err := cls[i].Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
			t.Fatal(err)
		}
		if _, _, err := cls[i].Read(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "every Serve to return (parked)", func() bool { return ps.served.Load() == n })
	closed := make(chan websocket.StatusCode, n)
	for _, cl := range cls {
		go func() {
			_, _, err := cl.Read(ctx) // answers the close
			closed <- websocket.CloseStatus(err)
		}()
	}
	if err := ps.hub.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if ps.ended.Load() != n {
		t.Fatalf("Shutdown returned with %d of %d connections ended", ps.ended.Load(), n)
	}
	for range n {
		if st := <-closed; st != websocket.StatusGoingAway {
			t.Fatalf("closed with %d, want 1001", st)
		}
	}
}

// A parked connection keeps its connlimit slot until it is really
// closed: with a cap of one, a second client is refused while the first
// is parked, and admitted once it has left.
func TestParkedConnStaysCounted(t *testing.T) {
	ps := newWSParkServer(t) // for its handler
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := connlimit.New(ln, connlimit.Config{Max: 1, Refusal: func(string) []byte {
		return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	}})
	srv := &http.Server{Handler: ps.handler, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lim) }()
	t.Cleanup(func() { _ = srv.Close() })
	url := "ws://" + ln.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := dial(t, url)
	<-ps.feeds
	if err := first.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := first.Read(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first connection to park", func() bool { return ps.served.Load() == 1 })
	if lim.Open() != 1 {
		t.Fatalf("%d connections counted while one is parked, want 1", lim.Open())
	}
	if _, resp, err := websocket.Dial(ctx, url, nil); err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second connection over the cap: %v, want 503", err)
	}
	_ = first.CloseNow()
	waitUntil(t, "the parked connection's slot", func() bool { return lim.Open() == 0 })
	dial(t, url)
	<-ps.feeds
}
