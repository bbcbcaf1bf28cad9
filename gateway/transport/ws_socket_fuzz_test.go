package transport

import (
	"net"
	"testing"
	"unicode/utf8"

	"github.com/coder/websocket"
)

// FuzzSocketReadMessage: whatever a client sends, the frame reader
// neither panics nor returns a message over the limit or text that is not
// UTF-8.
func FuzzSocketReadMessage(f *testing.F) {
	f.Add([]byte{0x81, 0x85, 1, 2, 3, 4, 'h' ^ 1, 'e' ^ 2, 'l' ^ 3, 'l' ^ 4, 'o' ^ 1})
	f.Add([]byte{0x01, 0x81, 0, 0, 0, 0, 'a', 0x80, 0x81, 0, 0, 0, 0, 'b'})
	f.Add([]byte{0x89, 0x80, 0, 0, 0, 0, 0x88, 0x82, 0, 0, 0, 0, 0x03, 0xE8})
	f.Add([]byte{0x82, 0xFF, 0, 0, 0, 0, 0, 0, 0, 9, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := net.Pipe()
		b.Close()
		defer a.Close()
		const limit = 64
		s := newSocket(a, data, limit)
		for {
			typ, msg, err := s.ReadMessage()
			if err != nil {
				return
			}
			if len(msg) > limit {
				t.Fatalf("message of %d bytes over the limit %d", len(msg), limit)
			}
			if typ == websocket.MessageText && !utf8.Valid(msg) {
				t.Fatalf("text message %q is not UTF-8", msg)
			}
		}
	})
}
