package transport_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// rawClient is a hand-written RFC 6455 client: it sends frames as given
// (masked or not, fragmented or not) and reads the server's frames.
type rawClient struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

// echoServer echoes every message (type and bytes) with a transport.Conn
// whose read limit is limit.
func echoServer(t *testing.T, limit int64) string {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := transport.Upgrade(w, r, transport.UpgradeOptions{ReadLimit: limit, Subprotocols: []string{"p1", "p2"}, OriginPatterns: []string{"*.example.org"}})
		if err != nil {
			return
		}
		c := transport.NewConn(ws, transport.WSConfig{})
		c.Serve(func(typ websocket.MessageType, data []byte) bool {
			return c.Send([]byte(typ.String() + ":" + string(data)))
		}, nil)
	}))
	t.Cleanup(hs.Close)
	return strings.TrimPrefix(hs.URL, "http://")
}

func dialRaw(t *testing.T, addr string, header string) (*rawClient, string) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET / HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" + header + "\r\n"
	if _, err := io.WriteString(nc, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	head := resp.Status + " " + resp.Header.Get("Sec-WebSocket-Accept") + " " + resp.Header.Get("Sec-WebSocket-Protocol")
	return &rawClient{t: t, nc: nc, br: br}, head
}

// frame sends one frame; masked as a client must unless mask is false.
func (c *rawClient) frame(fin bool, op byte, p []byte, mask bool) {
	c.t.Helper()
	if _, err := c.nc.Write(appendFrame(nil, fin, op, p, mask)); err != nil {
		c.t.Fatal(err)
	}
}

// appendFrame appends a client's frame to b.
func appendFrame(b []byte, fin bool, op byte, p []byte, mask bool) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	b = append(b, b0)
	m := byte(0)
	if mask {
		m = 0x80
	}
	switch n := len(p); {
	case n <= 125:
		b = append(b, m|byte(n))
	case n <= 0xFFFF:
		b = append(b, m|126, byte(n>>8), byte(n))
	default:
		b = append(b, m|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if mask {
		key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
		b = append(b, key[:]...)
		for i, x := range p {
			b = append(b, x^key[i&3])
		}
	} else {
		b = append(b, p...)
	}
	return b
}

// next reads one server frame: its opcode and payload.
func (c *rawClient) next() (byte, []byte) {
	c.t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		c.t.Fatalf("reading a frame: %v", err)
	}
	if h[0]&0x80 == 0 || h[1]&0x80 != 0 {
		c.t.Fatalf("server frame not final or masked: %x", h)
	}
	n := int(h[1] & 0x7F)
	switch n {
	case 126:
		var e [2]byte
		_, _ = io.ReadFull(c.br, e[:])
		n = int(binary.BigEndian.Uint16(e[:]))
	case 127:
		var e [8]byte
		_, _ = io.ReadFull(c.br, e[:])
		n = int(binary.BigEndian.Uint64(e[:]))
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(c.br, p); err != nil {
		c.t.Fatalf("reading a payload: %v", err)
	}
	return h[0] & 0x0F, p
}

func (c *rawClient) wantFrame(op byte, payload string) {
	c.t.Helper()
	gotOp, p := c.next()
	if gotOp != op || string(p) != payload {
		c.t.Fatalf("frame op %d %q, want op %d %q", gotOp, p, op, payload)
	}
}

// wantClose reads frames up to a close frame and checks its status.
func (c *rawClient) wantClose(status websocket.StatusCode) {
	c.t.Helper()
	for {
		op, p := c.next()
		if op != 0x8 {
			continue
		}
		if len(p) < 2 || websocket.StatusCode(binary.BigEndian.Uint16(p)) != status {
			c.t.Fatalf("close payload %q, want status %d", p, status)
		}
		return
	}
}

// The handshake answers RFC 6455's sample key with its accept value and
// selects the first of our subprotocols the client offers; fragments are
// joined, pings answered with their payload, long payloads framed with
// 16-bit lengths, and a close echoed.
func TestSocketHandshakeFramesAndCloseEcho(t *testing.T) {
	addr := echoServer(t, 1<<20)
	c, head := dialRaw(t, addr, "Sec-WebSocket-Protocol: x, p2, p1\r\n")
	if head != "101 Switching Protocols s3pPLMBiTxaQ9kYGzzhZRbK+xOo= p1" {
		t.Fatalf("handshake answer %q", head)
	}
	c.frame(true, 0x1, []byte("hello"), true)
	c.wantFrame(0x1, "MessageText:hello")
	c.frame(false, 0x2, []byte("ab"), true)
	c.frame(true, 0x9, []byte("between"), true) // a ping amid fragments
	c.wantFrame(0xA, "between")
	c.frame(false, 0x0, []byte("cd"), true)
	c.frame(true, 0x0, []byte("ef"), true)
	c.wantFrame(0x1, "MessageBinary:abcdef") // echoed as text
	long := bytes.Repeat([]byte("z"), 1000)
	c.frame(true, 0x1, long, true)
	c.wantFrame(0x1, "MessageText:"+string(long))
	c.frame(true, 0x8, []byte{0x03, 0xE8, 'b', 'y', 'e'}, true)
	c.wantClose(websocket.StatusNormalClosure)
	if _, err := c.br.ReadByte(); err != io.EOF {
		t.Fatalf("after the close handshake: %v, want EOF", err)
	}
}

// closePayload is a close frame's payload: status and reason.
func closePayload(status uint16, reason string) []byte {
	return append(binary.BigEndian.AppendUint16(nil, status), reason...)
}

// The server side of RFC 6455 against a table in the spirit of the
// Autobahn testsuite (cases 1-7, 9 and 12 by topic), over real sockets
// with a hand-written client: each case sends frames and wants the
// server's frames (echo: "type:data") or its close status. The read limit
// is 64 bytes.
func TestSocketProtocolTable(t *testing.T) {
	addr := echoServer(t, 64)
	a64 := bytes.Repeat([]byte("a"), 64)
	type step func(c *rawClient)
	send := func(fin bool, op byte, p []byte) step {
		return func(c *rawClient) { c.frame(fin, op, p, true) }
	}
	want := func(op byte, p string) step { return func(c *rawClient) { c.wantFrame(op, p) } }
	closes := func(st websocket.StatusCode) step { return func(c *rawClient) { c.wantClose(st) } }
	const (
		cont, text, bin, cls, ping, pong = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
	)
	cases := []struct {
		name  string
		steps []step
	}{
		// Framing and fragmentation (Autobahn 1, 5).
		{"text", []step{send(true, text, []byte("hello")), want(text, "MessageText:hello")}},
		{"empty-text", []step{send(true, text, nil), want(text, "MessageText:")}},
		{"binary-not-utf8", []step{send(true, bin, []byte{0xff, 0xfe}), want(text, "MessageBinary:\xff\xfe")}},
		{"fragments", []step{send(false, text, []byte("ab")), send(false, cont, []byte("cd")), send(true, cont, []byte("ef")),
			want(text, "MessageText:abcdef")}},
		{"empty-fragments", []step{send(false, text, nil), send(false, cont, nil), send(true, cont, []byte("x")), want(text, "MessageText:x")}},
		{"ping-inside-fragments", []step{send(false, text, []byte("ab")), send(true, ping, []byte("p")), want(pong, "p"),
			send(true, cont, []byte("cd")), want(text, "MessageText:abcd")}},
		{"pong-inside-fragments", []step{send(false, bin, []byte("ab")), send(true, pong, []byte("u")),
			send(true, cont, []byte("cd")), want(text, "MessageBinary:abcd")}},
		{"continuation-without-start", []step{send(true, cont, []byte("x")), closes(websocket.StatusProtocolError)}},
		{"continuation-after-end", []step{send(true, text, []byte("a")), want(text, "MessageText:a"),
			send(false, cont, []byte("x")), closes(websocket.StatusProtocolError)}},
		{"new-message-inside-fragmented", []step{send(false, text, []byte("ab")), send(true, text, []byte("cd")),
			closes(websocket.StatusProtocolError)}},
		// Control frames (Autobahn 2).
		{"ping-echo", []step{send(true, ping, []byte("hello")), want(pong, "hello")}},
		{"ping-empty", []step{send(true, ping, nil), want(pong, "")}},
		{"ping-125", []step{send(true, ping, bytes.Repeat([]byte("p"), 125)), want(pong, strings.Repeat("p", 125))}},
		{"ping-126", []step{send(true, ping, bytes.Repeat([]byte("p"), 126)), closes(websocket.StatusProtocolError)}},
		{"pong-unsolicited", []step{send(true, pong, []byte("u")), send(true, text, []byte("after")), want(text, "MessageText:after")}},
		{"pong-126", []step{send(true, pong, bytes.Repeat([]byte("p"), 126)), closes(websocket.StatusProtocolError)}},
		{"ping-fragmented", []step{send(false, ping, []byte("a")), closes(websocket.StatusProtocolError)}},
		{"close-fragmented", []step{send(false, cls, closePayload(1000, "")), closes(websocket.StatusProtocolError)}},
		// Reserved bits and opcodes, masking (Autobahn 3, 4; RFC 6455 5.1).
		{"rsv1", []step{send(true, text|0x40, []byte("x")), closes(websocket.StatusProtocolError)}},
		{"rsv2", []step{send(true, text|0x20, []byte("x")), closes(websocket.StatusProtocolError)}},
		{"rsv3", []step{send(true, text|0x10, []byte("x")), closes(websocket.StatusProtocolError)}},
		{"rsv-on-ping", []step{send(true, ping|0x70, nil), closes(websocket.StatusProtocolError)}},
		{"unmasked", []step{func(c *rawClient) { c.frame(true, text, []byte("x"), false) }, closes(websocket.StatusProtocolError)}},
		// UTF-8 (Autobahn 6).
		{"utf8-multibyte", []step{send(true, text, []byte("κόσμε")), want(text, "MessageText:κόσμε")}},
		{"utf8-split-across-fragments", []step{send(false, text, []byte("κ\xcf")), send(true, cont, []byte("\x8cσμε")),
			want(text, "MessageText:κόσμε")}},
		{"utf8-invalid", []step{send(true, text, []byte{0xff, 0xfe}), closes(websocket.StatusInvalidFramePayloadData)}},
		{"utf8-invalid-across-fragments", []step{send(false, text, []byte("κ\xce")), send(true, cont, []byte("\xff")),
			closes(websocket.StatusInvalidFramePayloadData)}},
		{"utf8-surrogate", []step{send(true, text, []byte{0xed, 0xa0, 0x80}), closes(websocket.StatusInvalidFramePayloadData)}},
		{"utf8-truncated-at-end", []step{send(false, text, []byte("a")), send(true, cont, []byte{0xe2, 0x82}),
			closes(websocket.StatusInvalidFramePayloadData)}},
		// Close frames (Autobahn 7).
		{"close-empty", []step{send(true, cls, nil), closes(websocket.StatusNormalClosure)}},
		{"close-one-byte", []step{send(true, cls, []byte{0x03}), closes(websocket.StatusProtocolError)}},
		{"close-reason", []step{send(true, cls, closePayload(1000, "bye")), closes(websocket.StatusNormalClosure)}},
		{"close-reason-123", []step{send(true, cls, closePayload(1000, strings.Repeat("r", 123))), closes(websocket.StatusNormalClosure)}},
		{"close-126", []step{send(true, cls, closePayload(1000, strings.Repeat("r", 124))), closes(websocket.StatusProtocolError)}},
		{"close-reason-invalid-utf8", []step{send(true, cls, closePayload(1000, "\xff\xfe")), closes(websocket.StatusInvalidFramePayloadData)}},
		{"close-after-fragment", []step{send(false, text, []byte("ab")), send(true, cls, closePayload(1000, "")),
			closes(websocket.StatusNormalClosure)}},
		{"ping-after-close", []step{send(true, cls, nil), send(true, ping, []byte("late")), closes(websocket.StatusNormalClosure)}},
		// Limits (the read limit, 64 bytes).
		{"limit-exact", []step{send(true, bin, a64), want(text, "MessageBinary:"+string(a64))}},
		{"limit", []step{send(true, text, append(a64, 'a')), closes(websocket.StatusMessageTooBig)}},
		{"limit-fragments", []step{send(false, text, a64[:40]), send(true, cont, a64[:40]), closes(websocket.StatusMessageTooBig)}},
		{"limit-announced", []step{func(c *rawClient) {
			// a header announcing 1 MiB, no payload: refused from the header
			_, _ = c.nc.Write([]byte{0x82, 0x80 | 127, 0, 0, 0, 0, 0, 0x10, 0, 0, 1, 2, 3, 4})
		}, closes(websocket.StatusMessageTooBig)}},
	}
	for _, op := range []byte{3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF} {
		cases = append(cases, struct {
			name  string
			steps []step
		}{fmt.Sprintf("opcode-%d", op), []step{send(true, op, nil), closes(websocket.StatusProtocolError)}})
	}
	for _, code := range []uint16{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999, 4000, 4999} {
		cases = append(cases, struct {
			name  string
			steps []step
		}{fmt.Sprintf("close-code-%d", code), []step{send(true, cls, closePayload(code, "")), closes(websocket.StatusCode(code))}})
	}
	for _, code := range []uint16{0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535} {
		cases = append(cases, struct {
			name  string
			steps []step
		}{fmt.Sprintf("close-code-invalid-%d", code), []step{send(true, cls, closePayload(code, "")), closes(websocket.StatusProtocolError)}})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := dialRaw(t, addr, "")
			for _, st := range tc.steps {
				st(c)
			}
		})
	}
}

// The Origin policy is coder/websocket's: same host or a listed pattern,
// else 403 before any upgrade; a bad handshake gets 400/426.
func TestUpgradeRefusals(t *testing.T) {
	addr := echoServer(t, 64)
	for _, tc := range []struct {
		header string
		want   string
	}{
		{"Origin: https://evil.example\r\n", "403 Forbidden"},
		{"Origin: https://a.example.org\r\n", "101 Switching Protocols"},
		{"Origin: http://" + addr + "\r\n", "101 Switching Protocols"},
	} {
		_, head := dialRaw(t, addr, tc.header)
		if !strings.HasPrefix(head, tc.want) {
			t.Errorf("%q: %q, want %s", tc.header, head, tc.want)
		}
	}
	resp, err := http.Get("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("a plain GET: %d, want 426", resp.StatusCode)
	}
}

// coder/websocket's client (the tests' and aepctl's) interoperates,
// fragmented writes included.
func TestSocketWithCoderClient(t *testing.T) {
	addr := echoServer(t, 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, _, err := websocket.Dial(ctx, "ws://"+addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.CloseNow()
	w, err := cl.Writer(ctx, websocket.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write([]byte("frag"))
	_, _ = w.Write([]byte("mented"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, b, err := cl.Read(ctx); err != nil || string(b) != "MessageText:fragmented" {
		t.Fatalf("read %q, %v", b, err)
	}
	if err := cl.Close(websocket.StatusNormalClosure, "done"); err != nil {
		t.Fatalf("close handshake: %v", err)
	}
}
