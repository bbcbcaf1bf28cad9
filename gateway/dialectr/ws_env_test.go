package dialectr_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wsClient is a real WebSocket client of /socket.
type wsClient struct {
	t      testing.TB
	c      *websocket.Conn
	frames chan []byte
	done   chan struct{}
	err    error // why reading stopped; set before done closes
}

type frame map[string]any

func (f frame) str(k string) string { s, _ := f[k].(string); return s }

// dialWS connects and, when hello is not empty, sends it and requires the
// server's hello back.
func (e *env) dialWS(hello string) *wsClient {
	e.t.Helper()
	return e.dialWSAs("", hello)
}

// dialWSAs is dialWS with a bearer token.
func (e *env) dialWSAs(token, hello string) *wsClient {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var opts *websocket.DialOptions
	if token != "" {
		opts = &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}}
	}
	c, _, err := websocket.Dial(ctx, strings.Replace(e.url, "http", "ws", 1)+"/socket", opts)
	if err != nil {
		e.t.Fatal(err)
	}
	c.SetReadLimit(8 << 20)
	w := &wsClient{t: e.t, c: c, frames: make(chan []byte, 1024), done: make(chan struct{})}
	go w.read()
	e.t.Cleanup(func() { _ = c.CloseNow() })
	if hello != "" {
		w.send(hello)
		if f := w.next(); f.str("type") != "hello" {
			e.t.Fatalf("got %v, want the server's hello", f)
		}
	}
	return w
}

const consumerHello = `{"type":"hello","versions":["0.1"],"role":"consumer","identity":{"agent":"test-consumer"}}`

func (w *wsClient) read() {
	defer close(w.done)
	defer close(w.frames)
	for {
		_, b, err := w.c.Read(context.Background())
		if err != nil {
			w.err = err
			return
		}
		w.frames <- b
	}
}

func (w *wsClient) send(s string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
		w.t.Fatal(err)
	}
}

// nextRaw returns the next message's bytes, skipping the server's pings.
func (w *wsClient) nextRaw() []byte {
	w.t.Helper()
	for {
		select {
		case b, ok := <-w.frames:
			if !ok {
				w.t.Fatalf("connection ended: %v", w.err)
			}
			if strings.HasPrefix(string(b), `{"type":"ping"`) {
				continue
			}
			return b
		case <-time.After(waitFor):
			w.t.Fatal("no frame")
		}
	}
}

func (w *wsClient) next() frame {
	w.t.Helper()
	b := w.nextRaw()
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		w.t.Fatalf("frame %q: %v", b, err)
	}
	return f
}

// closed waits for the connection to end and returns its close status.
func (w *wsClient) closed() websocket.StatusCode {
	w.t.Helper()
	for {
		select {
		case _, ok := <-w.frames:
			if !ok {
				return websocket.CloseStatus(w.err)
			}
		case <-time.After(waitFor):
			w.t.Fatal("connection still open")
		}
	}
}

// subscribe sends a subscribe frame and requires subscribed.
func (w *wsClient) subscribe(id, rest string) {
	w.t.Helper()
	if rest != "" {
		rest = "," + rest
	}
	w.send(`{"type":"subscribe","id":"` + id + `"` + rest + `}`)
	if f := w.next(); f.str("type") != "subscribed" || f.str("id") != id {
		w.t.Fatalf("got %v, want subscribed %s", f, id)
	}
}
