package transport

import (
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/aep-gateway/aep-gateway/internal/netpoll"
)

// parkedFD is a parked connection's place on the Hub's poller, the one
// owner of its descriptor's watch, for SSE streams and WebSockets alike:
// add puts the descriptor on the poller (and the stream in the Hub's set
// of parked streams, which a poller failure unparks), rearm watches it
// again, leave takes it off (netpoll's Remove), release gives the poller
// back. The owner closes the descriptor only after leave, on every path:
// a closed number may go to the next connection at once, and a late
// Remove (by number) would unwatch that one; a socket whose traffic must
// end earlier is shut down, not closed (Socket.kill).
//
// Concurrency: every method is safe from any goroutine; add holds mu
// until the watch is recorded, so that a leave racing a callback that
// fired at once waits for it. Lock order: mu before Hub.pmu.
//
// Size: a WebSocket's Conn embeds it, and every idle connection pays for
// it; the Hub and the gauge are found through the poller and the stream.
type parkedFD struct {
	ps *pollSet
	u  unparker

	mu sync.Mutex
	h  *netpoll.Handle // on the poller while set; guarded by mu
}

// init says which poller (from Hub.acquirePoller, whose reference the
// parkedFD now holds) and which stream (unparked when the poller fails).
func (f *parkedFD) init(ps *pollSet, u unparker) { f.ps, f.u = ps, u }

// gauge is the Hub's count of the streams of f's kind on the poller now.
func (f *parkedFD) gauge() *atomic.Int64 {
	if _, ws := f.u.(*Conn); ws {
		return &f.ps.hub.parkedWS
	}
	return &f.ps.hub.parked
}

// add watches sc: fn runs (on a poller dispatcher, and must not block)
// when it turns readable, hangs up or fails. The error says the poller
// cannot (a descriptor it refuses, or it failed: netpoll.ErrFailed); the
// connection is then off the poller.
func (f *parkedFD) add(sc syscall.Conn, fn func()) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, err := f.ps.p.Add(sc, fn)
	if err != nil {
		return err
	}
	if !f.ps.hub.track(f.ps, f.u) { // failed since Add: it watches nothing
		_ = h.Remove()
		return netpoll.ErrFailed
	}
	f.h = h
	f.gauge().Add(1)
	return nil
}

// rearm watches again after fn ran; nil once off the poller (nothing to
// watch).
func (f *parkedFD) rearm() error {
	f.mu.Lock()
	h := f.h
	f.mu.Unlock()
	if h == nil {
		return nil
	}
	return h.Rearm()
}

// leave takes the descriptor off the poller (waiting for a running fn) so
// that it may be closed; true for the one call that did. Idempotent.
func (f *parkedFD) leave() bool {
	f.mu.Lock()
	h := f.h
	f.h = nil
	f.mu.Unlock()
	if h == nil {
		return false
	}
	_ = h.Remove()
	f.ps.hub.untrack(f.ps, f.u)
	f.gauge().Add(-1)
	return true
}

// release gives the poller back (after leave); once.
func (f *parkedFD) release() { f.ps.hub.releasePoller(f.ps) }
