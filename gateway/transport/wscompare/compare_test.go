package wscompare

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// msg is the message the benchmarks move: 300 bytes of text, the size of
// a small AEP event.
var msg = bytes.Repeat([]byte("abcdefghij"), 30)

const request = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"

// server is an HTTP server on loopback whose handler upgrades each
// request with upgrade and sends what it returns on conns.
func server[T any](tb testing.TB, upgrade func(w http.ResponseWriter, r *http.Request) (T, bool)) (addr string, conns <-chan T) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ch := make(chan T, 4096)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := upgrade(w, r); ok {
			ch <- c
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), ch
}

func ours(w http.ResponseWriter, r *http.Request) (*transport.Socket, bool) {
	s, err := transport.Upgrade(w, r, transport.UpgradeOptions{})
	return s, err == nil
}

func gobwas(w http.ResponseWriter, r *http.Request) (net.Conn, bool) {
	c, _, _, err := ws.UpgradeHTTP(r, w)
	return c, err == nil
}

// handshake dials addr and completes a client handshake by hand.
func handshake(tb testing.TB, addr string) net.Conn {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.WriteString(c, request); err != nil {
		tb.Fatal(err)
	}
	var buf [512]byte
	n := 0
	for !bytes.Contains(buf[:n], []byte("\r\n\r\n")) {
		m, err := c.Read(buf[n:])
		if err != nil {
			tb.Fatal(err)
		}
		n += m
	}
	if !bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 101")) {
		tb.Fatalf("handshake answer %q", buf[:n])
	}
	return c
}

// maskedFrames is k masked client text frames carrying msg.
func maskedFrames(k int) []byte {
	var b []byte
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	for range k {
		b = append(b, 0x81, 0x80|126)
		b = binary.BigEndian.AppendUint16(b, uint16(len(msg)))
		b = append(b, key[:]...)
		for i, x := range msg {
			b = append(b, x^key[i&3])
		}
	}
	return b
}

// feed writes frames to c until it fails (the benchmark closed it).
func feed(c net.Conn, frames []byte) {
	for {
		if _, err := c.Write(frames); err != nil {
			return
		}
	}
}

// Frame read: the server reads masked 300-byte text messages off a
// loopback TCP connection, unbuffered (a parked connection holds no read
// buffer), unmasks them and checks their UTF-8.
func BenchmarkFrameRead(b *testing.B) {
	frames := maskedFrames(64)
	b.Run("ours", func(b *testing.B) {
		addr, conns := server(b, ours)
		cl := handshake(b, addr)
		s := <-conns
		go feed(cl, frames)
		b.SetBytes(int64(len(msg)))
		b.ReportAllocs()
		for b.Loop() {
			if _, p, err := s.ReadMessage(); err != nil || len(p) != len(msg) {
				b.Fatal(err)
			}
		}
		_ = cl.Close()
	})
	b.Run("gobwas-header", func(b *testing.B) {
		addr, conns := server(b, gobwas)
		cl := handshake(b, addr)
		c := <-conns
		go feed(cl, frames)
		b.SetBytes(int64(len(msg)))
		b.ReportAllocs()
		for b.Loop() {
			h, err := ws.ReadHeader(c)
			if err != nil {
				b.Fatal(err)
			}
			p := make([]byte, h.Length)
			if _, err := io.ReadFull(c, p); err != nil {
				b.Fatal(err)
			}
			ws.Cipher(p, h.Mask, 0)
			if !utf8.Valid(p) {
				b.Fatal("not UTF-8")
			}
		}
		_ = cl.Close()
	})
	b.Run("gobwas-wsutil", func(b *testing.B) {
		addr, conns := server(b, gobwas)
		cl := handshake(b, addr)
		c := <-conns
		go feed(cl, frames)
		b.SetBytes(int64(len(msg)))
		b.ReportAllocs()
		for b.Loop() {
			if p, _, err := wsutil.ReadClientData(c); err != nil || len(p) != len(msg) {
				b.Fatal(err)
			}
		}
		_ = cl.Close()
	})
}

// Batched write: 64 queued 300-byte messages written as frames to a
// loopback TCP connection (a client drains it): ours appends them to one
// buffer and writes it once (the Conn's writer); gobwas writes them
// through a bufio.Writer flushed once, or one write each (wsutil).
func BenchmarkBatchedWrite64(b *testing.B) {
	const batch = 64
	drain := func(c net.Conn) { _, _ = io.Copy(io.Discard, c) }
	b.Run("ours", func(b *testing.B) {
		addr, conns := server(b, ours)
		cl := handshake(b, addr)
		go drain(cl)
		s := <-conns
		buf := make([]byte, 0, 32<<10)
		b.SetBytes(batch * int64(len(msg)))
		b.ReportAllocs()
		for b.Loop() {
			buf = buf[:0]
			for range batch {
				buf = transport.AppendFrame(buf, 0x1, msg)
			}
			if err := s.Write(buf, 10*time.Second, false); err != nil {
				b.Fatal(err)
			}
		}
		_ = cl.Close()
	})
	b.Run("gobwas-bufio", func(b *testing.B) {
		addr, conns := server(b, gobwas)
		cl := handshake(b, addr)
		go drain(cl)
		c := <-conns
		bw := bufio.NewWriterSize(c, 32<<10)
		b.SetBytes(batch * int64(len(msg)))
		b.ReportAllocs()
		for b.Loop() {
			_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			for range batch {
				if err := ws.WriteFrame(bw, ws.NewTextFrame(msg)); err != nil {
					b.Fatal(err)
				}
			}
			if err := bw.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		_ = cl.Close()
	})
	b.Run("gobwas-wsutil", func(b *testing.B) {
		addr, conns := server(b, gobwas)
		cl := handshake(b, addr)
		go drain(cl)
		c := <-conns
		b.SetBytes(batch * int64(len(msg)))
		b.ReportAllocs()
		for b.Loop() {
			for range batch {
				if err := wsutil.WriteServerText(c, msg); err != nil {
					b.Fatal(err)
				}
			}
		}
		_ = cl.Close()
	})
}

// Upgrade: one client handshake over a new loopback TCP connection, from
// dial to the 101 read, the server upgrading through net/http (ours,
// gobwas UpgradeHTTP) or on the raw connection (gobwas Upgrade, which
// needs no net/http). Connecting dominates; the difference is the
// upgrade's.
func BenchmarkUpgrade(b *testing.B) {
	run := func(b *testing.B, addr string) {
		b.ReportAllocs()
		for b.Loop() {
			_ = handshake(b, addr).Close()
		}
	}
	b.Run("ours", func(b *testing.B) {
		addr, conns := server(b, ours)
		go func() {
			for s := range conns {
				s.Finish()
			}
		}()
		run(b, addr)
	})
	b.Run("gobwas-http", func(b *testing.B) {
		addr, conns := server(b, gobwas)
		go func() {
			for c := range conns {
				_ = c.Close()
			}
		}()
		run(b, addr)
	})
	b.Run("gobwas-raw", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = ws.Upgrade(c)
				_ = c.Close()
			}
		}()
		run(b, ln.Addr().String())
	})
}

// Idle memory: the heap held per upgraded, idle connection (both ends of
// 1,000 loopback connections in this process: the client's side is the
// same for both), after a GC. ours holds a *transport.Socket per
// connection, gobwas the net.Conn UpgradeHTTP returns (its framing keeps
// no state between frames).
func BenchmarkIdleConn(b *testing.B) {
	const n = 1000
	measure := func(b *testing.B, hold func(addr string) []any, addr string) {
		for b.Loop() {
			before := heap()
			held := hold(addr)
			after := heap()
			b.ReportMetric(float64(after-before)/n, "heapB/conn")
			runtime.KeepAlive(held)
			for _, h := range held {
				if c, ok := h.(io.Closer); ok {
					_ = c.Close()
				}
			}
		}
	}
	b.Run("ours", func(b *testing.B) {
		addr, conns := server(b, ours)
		measure(b, func(addr string) []any {
			var held []any
			for range n {
				held = append(held, handshake(b, addr))
				s := <-conns
				held = append(held, closer{s})
			}
			return held
		}, addr)
	})
	b.Run("gobwas", func(b *testing.B) {
		addr, conns := server(b, gobwas)
		measure(b, func(addr string) []any {
			var held []any
			for range n {
				held = append(held, handshake(b, addr), <-conns)
			}
			return held
		}, addr)
	})
}

type closer struct{ s *transport.Socket }

func (c closer) Close() error { c.s.Abort(); c.s.Finish(); return nil }

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}
