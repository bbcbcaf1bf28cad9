package transport_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
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
	b0 := op
	if fin {
		b0 |= 0x80
	}
	b := []byte{b0}
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
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
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

// Each protocol violation closes with its status: unmasked frame and
// reserved bits 1002, invalid UTF-8 in text 1007, a message over the read
// limit 1009, a continuation without a message 1002.
func TestSocketProtocolViolationsClose(t *testing.T) {
	addr := echoServer(t, 64)
	cases := []struct {
		name   string
		send   func(c *rawClient)
		status websocket.StatusCode
	}{
		{"unmasked", func(c *rawClient) { c.frame(true, 0x1, []byte("x"), false) }, websocket.StatusProtocolError},
		{"rsv", func(c *rawClient) { c.frame(true, 0x1|0x40, []byte("x"), true) }, websocket.StatusProtocolError},
		{"utf8", func(c *rawClient) { c.frame(true, 0x1, []byte{0xff, 0xfe}, true) }, websocket.StatusInvalidFramePayloadData},
		{"limit", func(c *rawClient) { c.frame(true, 0x1, bytes.Repeat([]byte("a"), 65), true) }, websocket.StatusMessageTooBig},
		{"limit-fragments", func(c *rawClient) {
			c.frame(false, 0x1, bytes.Repeat([]byte("a"), 40), true)
			c.frame(true, 0x0, bytes.Repeat([]byte("a"), 40), true)
		}, websocket.StatusMessageTooBig},
		{"continuation", func(c *rawClient) { c.frame(true, 0x0, []byte("x"), true) }, websocket.StatusProtocolError},
		{"control-too-long", func(c *rawClient) { c.frame(true, 0x9, bytes.Repeat([]byte("p"), 126), true) }, websocket.StatusProtocolError},
		{"bad-close-code", func(c *rawClient) { c.frame(true, 0x8, []byte{0x03, 0xED}, true) }, websocket.StatusProtocolError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := dialRaw(t, addr, "")
			tc.send(c)
			c.wantClose(tc.status)
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
