package connlimit

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// serveEcho accepts from l until it is closed, answering each line read.
func serveEcho(t *testing.T, l *Listener) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
}

func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// alive reports whether c is served (an echo comes back) rather than
// refused (the server closes it).
func alive(c net.Conn) bool {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("x\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "x\n"
}

func TestCapsRefuseAndRelease(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var refused sync.Map
	l := New(ln, Config{Max: 3, MaxPerHost: 2, OnRefuse: func(r string) {
		n, _ := refused.LoadOrStore(r, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
	}})
	serveEcho(t, l)
	addr := ln.Addr().String()

	a1, a2 := dialFrom(t, "127.0.0.1", addr), dialFrom(t, "127.0.0.1", addr)
	if !alive(a1) || !alive(a2) {
		t.Fatal("connections within the per-host cap are not served")
	}
	if alive(dialFrom(t, "127.0.0.1", addr)) {
		t.Fatal("third connection from one host served past MaxPerHost=2")
	}
	b1 := dialFrom(t, "127.0.0.2", addr)
	if !alive(b1) {
		t.Fatal("another host is refused while under the global cap")
	}
	if alive(dialFrom(t, "127.0.0.3", addr)) {
		t.Fatal("fourth connection served past Max=3")
	}
	// What was open keeps being served.
	if !alive(a1) || !alive(b1) {
		t.Fatal("open connections stopped being served after refusals")
	}
	// Closing one gives its slot back.
	a2.Close()
	deadline := time.Now().Add(2 * time.Second)
	for l.Open() != 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !alive(dialFrom(t, "127.0.0.1", addr)) {
		t.Fatal("slot not released by Close")
	}
	for _, reason := range []string{ReasonPerHost, ReasonGlobal} {
		if n, ok := refused.Load(reason); !ok || n.(*atomic.Int32).Load() != 1 {
			t.Errorf("refusals for %s: want 1", reason)
		}
	}
}

func TestRefusalIsAnswered(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	msg := "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno"
	l := New(ln, Config{MaxPerHost: 1, Refusal: func(string) []byte { return []byte(msg) }})
	serveEcho(t, l)
	held := dialFrom(t, "127.0.0.1", ln.Addr().String())
	if !alive(held) {
		t.Fatal("first connection not served")
	}
	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatalf("refused client got no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || string(body) != "no" {
		t.Fatalf("refusal: %d %q", resp.StatusCode, body)
	}
}

// flakyListener fails its first n Accepts as a process out of descriptors
// does.
type flakyListener struct {
	net.Listener
	fails atomic.Int32
}

func (f *flakyListener) Accept() (net.Conn, error) {
	if f.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return f.Listener.Accept()
}

func TestAcceptErrorsAreBackedOff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: ln}
	fl.fails.Store(5)
	var seen atomic.Int32
	l := New(fl, Config{OnAcceptError: func(err error, _ time.Duration) {
		if errors.Is(err, syscall.EMFILE) {
			seen.Add(1)
		}
	}})
	serveEcho(t, l)
	if !alive(dialFrom(t, "127.0.0.1", ln.Addr().String())) {
		t.Fatal("listener stopped accepting after accept errors")
	}
	if seen.Load() != 5 {
		t.Fatalf("accept errors reported: %d, want 5", seen.Load())
	}
	// Close ends an Accept that is backing off.
	fl.fails.Store(1000)
	done := make(chan error, 1)
	l2 := New(fl, Config{})
	go func() { _, err := l2.Accept(); done <- err }()
	time.Sleep(20 * time.Millisecond)
	_ = l2.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Accept kept backing off after Close")
	}
}

func TestHostOfGroupsIPv6By64(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7:5000":             "192.0.2.7",
		"[2001:db8:1:2:aaaa::1]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:bbbb::9]:80":  "2001:db8:1:2::/64",
		"[2001:db8:1:3::1]:80":       "2001:db8:1:3::/64",
		"[::ffff:192.0.2.7]:1":       "192.0.2.7",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := hostOf(a); got != want {
			t.Errorf("%s: %s, want %s", addr, got, want)
		}
	}
}

// Connections from an exempt proxy address are not held to MaxPerHost (many
// clients arrive through it) but count toward Max; other addresses keep
// their per-host cap, and an exempt connection's slot is given back.
func TestPerHostExemptProxies(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(ln, Config{Max: 5, MaxPerHost: 1, PerHostExempt: []netip.Prefix{netip.MustParsePrefix("127.0.0.8/30")}})
	serveEcho(t, l)
	addr := ln.Addr().String()
	var proxied []net.Conn
	for range 4 {
		c := dialFrom(t, "127.0.0.9", addr)
		if !alive(c) {
			t.Fatal("a proxy's connection refused under the global cap")
		}
		proxied = append(proxied, c)
	}
	if !alive(dialFrom(t, "127.0.0.2", addr)) {
		t.Fatal("a client's first connection refused")
	}
	if alive(dialFrom(t, "127.0.0.9", addr)) {
		t.Fatal("a proxy's sixth connection served past Max=5")
	}
	proxied[0].Close()
	deadline := time.Now().Add(2 * time.Second)
	for l.Open() != 4 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !alive(dialFrom(t, "127.0.0.10", addr)) {
		t.Fatal("an exempt connection's slot was not given back")
	}
	proxied[1].Close() // room under Max again: only MaxPerHost can refuse now
	for l.Open() != 4 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if alive(dialFrom(t, "127.0.0.2", addr)) {
		t.Fatal("a non-exempt client's second connection served past MaxPerHost=1")
	}
}
