package gatewaytest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// WSURL turns the http:// base URL of a test server and a path into the
// ws:// URL of that path.
func WSURL(base, path string) string {
	return "ws" + strings.TrimPrefix(base, "http") + path
}

// WSOptions tune DialWS.
type WSOptions struct {
	Subprotocols []string
	Header       http.Header
	// HTTPClient carries the handshake (and so dials the socket); nil
	// means http.DefaultClient.
	HTTPClient *http.Client
	// Buffer is how many received messages the reader holds ahead of the
	// test. Zero means none: a test that stops reading stalls the socket.
	Buffer int
	// ReadLimit bounds one received message. Zero means 8 MiB.
	ReadLimit int64
}

// WSConn is a WebSocket client connection read by a goroutine it owns;
// Close (also run by tb's cleanup) ends the connection and waits for it.
type WSConn struct {
	tb     testing.TB
	C      *websocket.Conn
	frames chan []byte
	done   chan struct{}
	err    error // why reading ended; read after done closes
	pings  atomic.Int64
}

// DialWS connects to url (ws://...), failing tb if the handshake fails.
func DialWS(tb testing.TB, url string, o WSOptions) *WSConn {
	tb.Helper()
	w := &WSConn{tb: tb, frames: make(chan []byte, o.Buffer), done: make(chan struct{})}
	c, resp, err := dialWS(url, o, func() { w.pings.Add(1) })
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		tb.Fatalf("dial %s: status %d: %v", url, status, err)
	}
	w.C = c
	go w.read()
	tb.Cleanup(w.Close)
	return w
}

// TryDialWS dials without a reader, for handshake tests; the caller closes
// the connection. o.Buffer is ignored.
func TryDialWS(url string, o WSOptions) (*websocket.Conn, *http.Response, error) {
	return dialWS(url, o, nil)
}

// dialWS dials; onPing, when not nil, runs for each ping received.
func dialWS(url string, o WSOptions, onPing func()) (*websocket.Conn, *http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	opts := &websocket.DialOptions{Subprotocols: o.Subprotocols, HTTPHeader: o.Header, HTTPClient: o.HTTPClient}
	if onPing != nil {
		opts.OnPingReceived = func(context.Context, []byte) bool { onPing(); return true }
	}
	c, resp, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		return nil, resp, fmt.Errorf("websocket dial: %w", err)
	}
	limit := o.ReadLimit
	if limit == 0 {
		limit = 8 << 20
	}
	c.SetReadLimit(limit)
	return c, resp, nil
}

func (w *WSConn) read() {
	defer close(w.done)
	defer close(w.frames)
	for {
		typ, b, err := w.C.Read(context.Background())
		if err != nil {
			w.err = err
			return
		}
		if typ != websocket.MessageText {
			w.err = errors.New("binary message from the server")
			_ = w.C.CloseNow()
			return
		}
		w.frames <- b
	}
}

// Close ends the connection at once and waits for the reader; idempotent.
func (w *WSConn) Close() {
	_ = w.C.CloseNow()
	for range w.frames { // the reader may be blocked handing one over
	}
	<-w.done
}

// Send writes one text message, failing tb on an error.
func (w *WSConn) Send(msg string) {
	w.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	if err := w.C.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		w.tb.Fatalf("websocket write: %v", err)
	}
}

// TryNext returns the next message within d; an error says the connection
// ended (ErrEnded, with the close status in the chain: websocket.CloseStatus) or
// nothing came in time.
func (w *WSConn) TryNext(d time.Duration) ([]byte, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case b, ok := <-w.frames:
		if !ok {
			return nil, fmt.Errorf("connection %w: %w", ErrEnded, w.err)
		}
		return b, nil
	case <-t.C:
		return nil, fmt.Errorf("no WebSocket message within %v", d)
	}
}

// NextRaw returns the next message, failing tb if the connection ends or
// nothing comes within Wait.
func (w *WSConn) NextRaw() []byte {
	w.tb.Helper()
	b, err := w.TryNext(Wait)
	if err != nil {
		w.tb.Fatal(err)
	}
	return b
}

// End reads the rest of the connection and returns it with the close
// status (-1 without a close frame), failing tb if the connection has not
// ended within d.
func (w *WSConn) End(d time.Duration) ([][]byte, websocket.StatusCode) {
	w.tb.Helper()
	deadline := time.Now().Add(d)
	var out [][]byte
	for {
		b, err := w.TryNext(time.Until(deadline))
		if errors.Is(err, ErrEnded) {
			return out, websocket.CloseStatus(w.err)
		}
		if err != nil {
			w.tb.Fatalf("connection still open after %v (%d messages read)", d, len(out))
		}
		out = append(out, b)
	}
}

// Closed reads the rest of the connection (logging what it discards) and
// returns the close status, failing tb if it has not ended within Wait.
func (w *WSConn) Closed() websocket.StatusCode {
	w.tb.Helper()
	rest, st := w.End(Wait)
	for _, b := range rest {
		w.tb.Logf("before close: %s", b)
	}
	return st
}

// Pings is how many WebSocket ping control frames the server sent; they
// are answered by the library while the connection is read.
func (w *WSConn) Pings() int64 { return w.pings.Load() }
