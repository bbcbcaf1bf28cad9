package transport_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// wsServer serves each connection with a transport.Conn: serve gets the
// Conn and returns the message handler; served is closed when Serve has
// returned (every goroutine of the connection joined).
func wsServer(t testing.TB, cfg transport.WSConfig, serve func(*transport.Conn) func(websocket.MessageType, []byte) bool) (url string, served <-chan struct{}) {
	t.Helper()
	done := make(chan struct{})
	var once sync.Once
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := transport.Upgrade(w, r, transport.UpgradeOptions{})
		if err != nil {
			return
		}
		c := transport.NewConn(ws, cfg)
		c.Serve(serve(c), nil)
		once.Do(func() { close(done) }) // the first connection's end
	}))
	t.Cleanup(hs.Close)
	return "ws" + strings.TrimPrefix(hs.URL, "http"), done
}

func dial(t testing.TB, url string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

func read(t *testing.T, c *websocket.Conn) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, b, err := c.Read(ctx)
	return string(b), err
}

func waitServed(t *testing.T, served <-chan struct{}) {
	t.Helper()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
}

// Replies in order, the closing message before the close frame, the
// bookkeeping of what was written, and Close behind what is queued.
func TestConnWritesInOrderThenClosingMessageAndClose(t *testing.T) {
	var mu sync.Mutex
	var written []any
	cfg := transport.WSConfig{
		Closing: func(reason string) []byte { return []byte("closing:" + reason) },
		Written: func(meta any) { mu.Lock(); written = append(written, meta); mu.Unlock() },
	}
	url, served := wsServer(t, cfg, func(c *transport.Conn) func(websocket.MessageType, []byte) bool {
		return func(_ websocket.MessageType, data []byte) bool {
			if string(data) == "bye" {
				c.Close(websocket.StatusNormalClosure, "bye")
				return false
			}
			c.SendCtx(c.Context(), transport.Item{Msg: []byte("echo:" + string(data)), Meta: string(data)})
			return true
		}
	})
	cl := dial(t, url)
	ctx := context.Background()
	for _, m := range []string{"1", "2", "bye"} {
		if err := cl.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"echo:1", "echo:2", "closing:bye"} {
		if got, err := read(t, cl); err != nil || got != want {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
	}
	if _, err := read(t, cl); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("after the closing message: %v, want close 1000", err)
	}
	waitServed(t, served)
	mu.Lock()
	defer mu.Unlock()
	if len(written) != 2 || written[0] != "1" || written[1] != "2" {
		t.Fatalf("written bookkeeping %v", written)
	}
}

// A peer that is silent for three periods of a frame heartbeat gets the
// timeout's message (the closing hook here) and 1008.
func TestConnFrameHeartbeatClosesASilentPeer(t *testing.T) {
	cfg := transport.WSConfig{
		Heartbeat: transport.Heartbeat{Every: 20 * time.Millisecond, Frame: func() []byte { return []byte("ping") }},
		Closing:   func(reason string) []byte { return []byte("closing") },
	}
	url, served := wsServer(t, cfg, func(c *transport.Conn) func(websocket.MessageType, []byte) bool {
		c.StartHeartbeat()
		return func(websocket.MessageType, []byte) bool { return true }
	})
	cl := dial(t, url)
	pings := 0
	for {
		got, err := read(t, cl)
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
				t.Fatalf("closed with %v, want 1008", err)
			}
			break
		}
		switch got {
		case "ping":
			pings++
		case "closing":
		default:
			t.Fatalf("unexpected %q", got)
		}
	}
	if pings < 2 {
		t.Fatalf("%d pings before the timeout, want at least 2", pings)
	}
	waitServed(t, served)
}

// Protocol pings: a peer whose pongs never come (it does not read) is
// timed out with the OnTimeout message and status.
func TestConnProtocolPingTimesOutAPeerThatDoesNotAnswer(t *testing.T) {
	cfg := transport.WSConfig{Heartbeat: transport.Heartbeat{
		Every: 20 * time.Millisecond,
		OnTimeout: func(time.Duration) ([]byte, websocket.StatusCode, string) {
			return []byte("timeout"), websocket.StatusGoingAway, "heartbeat timeout"
		},
	}}
	url, served := wsServer(t, cfg, func(c *transport.Conn) func(websocket.MessageType, []byte) bool {
		c.StartHeartbeat()
		return func(websocket.MessageType, []byte) bool { return true }
	})
	cl := dial(t, url)
	time.Sleep(150 * time.Millisecond) // not reading: pongs are not sent
	if got, err := read(t, cl); err != nil || got != "timeout" {
		t.Fatalf("read %q, %v; want the timeout message", got, err)
	}
	if _, err := read(t, cl); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("closed with %v, want 1001", err)
	}
	waitServed(t, served)
}

// CloseNow skips the queue; a worker started with Go is joined by Serve.
func TestConnCloseNowSkipsTheQueueAndJoinsWorkers(t *testing.T) {
	workerDone := make(chan struct{})
	url, served := wsServer(t, transport.WSConfig{Outbound: 4}, func(c *transport.Conn) func(websocket.MessageType, []byte) bool {
		c.Go(func() {
			defer close(workerDone)
			<-c.Context().Done()
		})
		return func(_ websocket.MessageType, data []byte) bool {
			for i := 0; i < 4; i++ { // fills the queue while the writer is busy or not
				if !c.SendCtx(c.Context(), transport.Item{Msg: []byte("queued")}) {
					break
				}
			}
			c.CloseNow(websocket.StatusTryAgainLater, "now")
			return true
		}
	})
	cl := dial(t, url)
	if err := cl.Write(context.Background(), websocket.MessageText, []byte("go")); err != nil {
		t.Fatal(err)
	}
	for {
		got, err := read(t, cl)
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusTryAgainLater {
				t.Fatalf("closed with %v, want 1013", err)
			}
			break
		}
		if got != "queued" {
			t.Fatalf("unexpected %q", got)
		}
	}
	waitServed(t, served)
	select {
	case <-workerDone:
	default:
		t.Fatal("Serve returned before its worker")
	}
}

// A handler that ends the read loop without a close (the peer's
// messages are refused) still returns: Serve stops the writer itself.
func TestConnServeReturnsWhenThePeerLeaves(t *testing.T) {
	url, served := wsServer(t, transport.WSConfig{}, func(c *transport.Conn) func(websocket.MessageType, []byte) bool {
		return func(websocket.MessageType, []byte) bool { return true }
	})
	cl := dial(t, url)
	_ = cl.CloseNow()
	waitServed(t, served)
}

// A handler that panics (a bug) ends its connection with 1011
// internal_error, after the dialect's closing message, and the connection's
// goroutines are joined; the server goes on serving others.
func TestConnHandlerPanicClosesWith1011(t *testing.T) {
	cfg := transport.WSConfig{Closing: func(reason string) []byte { return []byte("closing:" + reason) }}
	url, served := wsServer(t, cfg, func(c *transport.Conn) func(websocket.MessageType, []byte) bool {
		return func(_ websocket.MessageType, data []byte) bool {
			if string(data) == "boom" {
				panic("a bug in the handler")
			}
			c.Send([]byte("ok:" + string(data)))
			return true
		}
	})
	cl := dial(t, url)
	ctx := context.Background()
	for _, m := range []string{"1", "boom"} {
		if err := cl.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"ok:1", "closing:internal_error"} {
		if got, err := read(t, cl); err != nil || got != want {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
	}
	_, err := read(t, cl)
	if websocket.CloseStatus(err) != websocket.StatusInternalError {
		t.Fatalf("after the panic: %v, want close 1011", err)
	}
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Reason != "internal_error" {
		t.Fatalf("close reason %v, want internal_error", err)
	}
	waitServed(t, served)
	cl2 := dial(t, url) // the server still serves
	if err := cl2.Write(ctx, websocket.MessageText, []byte("2")); err != nil {
		t.Fatal(err)
	}
	if got, err := read(t, cl2); err != nil || got != "ok:2" {
		t.Fatalf("a new connection after the panic: %q, %v", got, err)
	}
}
