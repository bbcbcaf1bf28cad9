//go:build linux

package transport

import (
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/aep-gateway/aep-gateway/internal/netpoll"
)

// The poller lives while streams are parked: the first acquire starts it,
// the last release closes it, and the next acquire starts a new one.
func TestHubPollerLivesWhileStreamsAreParked(t *testing.T) {
	h := NewHub(0)
	a := h.acquirePoller()
	if a == nil {
		t.Fatal("no poller on Linux")
	}
	if b := h.acquirePoller(); b != a {
		t.Fatal("a second parked stream got another poller")
	}
	h.releasePoller(a)
	if h.pset != a {
		t.Fatal("the poller closed while a stream is still parked")
	}
	h.releasePoller(a)
	if h.pset != nil {
		t.Fatal("the poller outlived the last parked stream")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := a.p.Add(ln.(syscall.Conn), func() {}); !errors.Is(err, netpoll.ErrClosed) {
		t.Fatalf("Add on the released poller: %v, want ErrClosed", err)
	}
	c := h.acquirePoller()
	if c == nil || c == a {
		t.Fatalf("after the last release: poller %p, want a new one (old %p)", c, a)
	}
	h.releasePoller(c)
	h.SetParking(false)
	if h.acquirePoller() != nil {
		t.Fatal("a poller with parking off")
	}
}
