package gatewaytest

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// SmallSockets gives the sockets of chosen test clients small kernel
// buffers so that a client that stops reading stalls the server after
// kilobytes rather than megabytes, and can give them normal buffers again
// (Grow): with tiny buffers a resumed stream crawls. Linux doubles the
// sizes asked for. Its clients connect from SmallSocketsIP, which is how
// its Listener tells their sockets from the others (loopback only).
type SmallSockets struct {
	Bytes int // buffer size asked for; zero means 4096

	mu    sync.Mutex
	conns []*net.TCPConn
}

func (s *SmallSockets) size() int {
	if s.Bytes <= 0 {
		return 4096
	}
	return s.Bytes
}

func (s *SmallSockets) add(c net.Conn, small func(*net.TCPConn)) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	small(tc)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns = append(s.conns, tc)
}

// Grow gives every socket seen so far 1 MiB buffers.
func (s *SmallSockets) Grow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.SetReadBuffer(1 << 20)
		_ = c.SetWriteBuffer(1 << 20)
	}
}

// SmallSocketsIP is the loopback address SmallSockets clients connect from.
var SmallSocketsIP = net.IPv4(127, 0, 0, 2)

// SmallSocketsSupported says this host can connect from SmallSocketsIP
// (Linux routes all of 127.0.0.0/8 to loopback; macOS by default only
// 127.0.0.1): tests using SmallSockets skip without it.
func SmallSocketsSupported() bool {
	ln, err := net.Listen("tcp", net.JoinHostPort(SmallSocketsIP.String(), "0"))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// Client is an HTTP/1.1 client whose sockets have a small receive buffer.
// It reaches loopback servers only.
func (s *SmallSockets) Client() *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: SmallSocketsIP}}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err == nil {
				s.add(c, func(c *net.TCPConn) { _ = c.SetReadBuffer(s.size()) })
			}
			return c, err
		},
		DisableCompression: true,
	}}
}

// Listener wraps ln so that every socket accepted from one of s's clients
// has a small send buffer; other sockets are left alone.
func (s *SmallSockets) Listener(ln net.Listener) net.Listener {
	return &smallListener{Listener: ln, s: s}
}

type smallListener struct {
	net.Listener
	s *SmallSockets
}

func (l *smallListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok && a.IP.Equal(SmallSocketsIP) {
		l.s.add(c, func(c *net.TCPConn) { _ = c.SetWriteBuffer(l.s.size()) })
	}
	return c, nil
}
