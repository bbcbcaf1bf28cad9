//go:build linux

package netpoll_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/internal/netpoll"
)

// pair returns both ends of a real TCP connection: the server side (the
// one parked) and the client.
func pair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

func newPoller(t *testing.T) *netpoll.Poller {
	t.Helper()
	p, err := netpoll.New(netpoll.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func signal(ch chan struct{}) func() {
	return func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// watched is a new Poller watching the server side of a new connection:
// fired receives a token each time the callback runs.
func watched(t *testing.T) (p *netpoll.Poller, srv, cli net.Conn, h *netpoll.Handle, fired chan struct{}) {
	t.Helper()
	p = newPoller(t)
	srv, cli = pair(t)
	fired = make(chan struct{}, 1)
	h, err := p.Add(srv.(syscall.Conn), signal(fired))
	if err != nil {
		t.Fatal(err)
	}
	return p, srv, cli, h, fired
}

func TestPeerCloseFires(t *testing.T) {
	p, srv, cli, h, fired := watched(t)
	// the connection keeps working through net.Conn while watched
	if _, err := srv.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(cli, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("read %q, %v", buf, err)
	}
	cli.Close()
	<-fired
	if _, err := srv.Read(buf); !errors.Is(err, io.EOF) {
		t.Fatalf("read after the peer closed: %v, want EOF", err)
	}
	if err := h.Remove(); err != nil {
		t.Fatal(err)
	}
	if n := p.Watched(); n != 0 {
		t.Fatalf("watched %d after Remove", n)
	}
}

func TestRearmFiresAgain(t *testing.T) {
	_, srv, cli, h, fired := watched(t)
	buf := make([]byte, 1)
	for i := range 3 {
		if _, err := cli.Write([]byte{byte('a' + i)}); err != nil {
			t.Fatal(err)
		}
		<-fired
		if _, err := io.ReadFull(srv, buf); err != nil || buf[0] != byte('a'+i) {
			t.Fatalf("round %d: read %q, %v", i, buf, err)
		}
		if err := h.Rearm(); err != nil {
			t.Fatal(err)
		}
	}
	cli.Close()
	<-fired
	if err := h.Remove(); err != nil {
		t.Fatal(err)
	}
}

func TestRemoveIsIdempotentAndUnwatches(t *testing.T) {
	p := newPoller(t)
	srv, cli := pair(t)
	h, err := p.Add(srv.(syscall.Conn), func() {})
	if err != nil {
		t.Fatal(err)
	}
	// the kernel refuses a second ADD of a watched descriptor
	if _, err := p.Add(srv.(syscall.Conn), func() {}); err == nil {
		t.Fatal("a second Add of a watched connection succeeded")
	}
	if err := h.Remove(); err != nil {
		t.Fatal(err)
	}
	if err := h.Remove(); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if err := h.Rearm(); err != nil {
		t.Fatalf("Rearm after Remove: %v", err)
	}
	// removed, the descriptor can be added again, and fires
	fired := make(chan struct{}, 1)
	h2, err := p.Add(srv.(syscall.Conn), signal(fired))
	if err != nil {
		t.Fatalf("Add after Remove: %v", err)
	}
	cli.Close()
	<-fired
	if err := h2.Remove(); err != nil {
		t.Fatal(err)
	}
}

func TestCloseJoinsAndRefuses(t *testing.T) {
	p, err := netpoll.New(netpoll.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, cli := pair(t)
	started, release := make(chan struct{}), make(chan struct{})
	h, err := p.Add(srv.(syscall.Conn), func() {
		close(started)
		<-release // a misbehaving fn: Close must still wait for it
	})
	if err != nil {
		t.Fatal(err)
	}
	cli.Close()
	<-started
	closed := make(chan struct{})
	go func() {
		p.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while fn was running")
	default:
	}
	close(release)
	<-closed
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := p.Add(srv.(syscall.Conn), func() {}); !errors.Is(err, netpoll.ErrClosed) {
		t.Fatalf("Add after Close: %v, want ErrClosed", err)
	}
	if err := h.Rearm(); !errors.Is(err, netpoll.ErrClosed) {
		t.Fatalf("Rearm after Close: %v, want ErrClosed", err)
	}
	if err := h.Remove(); err != nil {
		t.Fatalf("Remove after Close: %v", err)
	}
}

func TestManyConnections(t *testing.T) {
	p := newPoller(t)
	const n = 64
	fired := make(chan int, n)
	clients := make([]net.Conn, n)
	handles := make([]*netpoll.Handle, n)
	for i := range n {
		srv, cli := pair(t)
		clients[i] = cli
		h, err := p.Add(srv.(syscall.Conn), func() { fired <- i })
		if err != nil {
			t.Fatal(err)
		}
		handles[i] = h
	}
	for i := n - 1; i >= 0; i-- {
		clients[i].Close()
	}
	seen := make(map[int]bool, n)
	for range n {
		i := <-fired
		if seen[i] {
			t.Fatalf("connection %d fired twice without Rearm", i)
		}
		seen[i] = true
		if err := handles[i].Remove(); err != nil {
			t.Fatal(err)
		}
	}
	if w := p.Watched(); w != 0 {
		t.Fatalf("watched %d after removing all", w)
	}
}

// A poller whose wait fails says so once (OnFail, with the cause), and
// refuses from then on (ErrFailed, wrapping the cause) instead of
// accepting descriptors it will never report on; Remove and Close still
// work.
func TestWaitFailureIsReportedAndRefuses(t *testing.T) {
	errBroken := errors.New("epoll broken")
	failed := make(chan error, 2)
	p, err := netpoll.New(netpoll.Options{OnFail: func(err error) { failed <- err }})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	srv, _ := pair(t)
	h, err := p.Add(srv.(syscall.Conn), func() {})
	if err != nil {
		t.Fatal(err)
	}
	p.Fail(errBroken)
	select {
	case err := <-failed:
		if !errors.Is(err, errBroken) {
			t.Fatalf("OnFail told %v, want the wait's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the failure was never reported")
	}
	srv2, _ := pair(t)
	if _, err := p.Add(srv2.(syscall.Conn), func() {}); !errors.Is(err, netpoll.ErrFailed) || !errors.Is(err, errBroken) {
		t.Fatalf("Add after the failure: %v, want ErrFailed wrapping the cause", err)
	}
	if err := h.Rearm(); !errors.Is(err, netpoll.ErrFailed) {
		t.Fatalf("Rearm after the failure: %v, want ErrFailed", err)
	}
	if err := h.Remove(); err != nil {
		t.Fatalf("Remove after the failure: %v", err)
	}
	p.Fail(errors.New("again")) // no second report
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if len(failed) != 0 {
		t.Fatalf("OnFail ran again: %v", <-failed)
	}
}

// A callback that blocks (it must not, but may be slow) delays only
// itself: the others still run.
func TestABlockingCallbackDoesNotStallTheOthers(t *testing.T) {
	p := newPoller(t)
	srvA, cliA := pair(t)
	srvB, cliB := pair(t)
	started, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before Close, which waits for A's
	hA, err := p.Add(srvA.(syscall.Conn), func() {
		close(started)
		<-release
	})
	if err != nil {
		t.Fatal(err)
	}
	firedB := make(chan struct{}, 1)
	hB, err := p.Add(srvB.(syscall.Conn), signal(firedB))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cliA.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	<-started
	if _, err := cliB.Write([]byte("b")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-firedB:
	case <-time.After(10 * time.Second):
		t.Fatal("B's callback never ran while A's blocked")
	}
	releaseOnce.Do(func() { close(release) })
	if err := hA.Remove(); err != nil {
		t.Fatal(err)
	}
	if err := hB.Remove(); err != nil {
		t.Fatal(err)
	}
}
