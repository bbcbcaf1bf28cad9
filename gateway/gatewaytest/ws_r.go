package gatewaytest

import (
	"bytes"
	"encoding/json"
	"testing"
)

// RConsumerHello is a dialect R consumer's hello.
const RConsumerHello = `{"type":"hello","versions":["0.1"],"role":"consumer","identity":{"agent":"gatewaytest"}}`

// RFrame is a dialect R control frame, decoded loosely.
type RFrame map[string]any

// Str is the frame's string field k, "" when absent.
func (f RFrame) Str(k string) string { s, _ := f[k].(string); return s }

// IsRPing says b is the server's application-level ping frame.
func IsRPing(b []byte) bool { return bytes.HasPrefix(b, []byte(`{"type":"ping"`)) }

// WSR is a dialect R WebSocket connection.
type WSR struct {
	*WSConn
}

// DialWSR connects and, when hello is not empty, sends it and requires
// the server's hello back.
func DialWSR(tb testing.TB, url, hello string, o WSOptions) *WSR {
	tb.Helper()
	w := &WSR{DialWS(tb, url, o)}
	if hello != "" {
		w.Send(hello)
		if f := w.Next(); f.Str("type") != "hello" {
			tb.Fatalf("got %v, want the server's hello", f)
		}
	}
	return w
}

// NextFrame returns the next message's bytes, skipping the server's pings.
func (w *WSR) NextFrame() []byte {
	w.tb.Helper()
	for {
		if b := w.NextRaw(); !IsRPing(b) {
			return b
		}
	}
}

// Next returns the next message other than a ping, decoded.
func (w *WSR) Next() RFrame {
	w.tb.Helper()
	b := w.NextFrame()
	var f RFrame
	if err := json.Unmarshal(b, &f); err != nil {
		w.tb.Fatalf("frame %q: %v", b, err)
	}
	return f
}

// Subscribe sends a subscribe frame (rest: more JSON members, or "") and
// requires subscribed.
func (w *WSR) Subscribe(id, rest string) {
	w.tb.Helper()
	if rest != "" {
		rest = "," + rest
	}
	w.Send(`{"type":"subscribe","id":"` + id + `"` + rest + `}`)
	if f := w.Next(); f.Str("type") != "subscribed" || f.Str("id") != id {
		w.tb.Fatalf("got %v, want subscribed %s", f, id)
	}
}
