package transport

import (
	"errors"

	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/internal/netpoll"
)

// The Hub's poller: started by the first stream that parks, closed by the
// last one to end, and given up for good when its wait fails.
//
// A poller failure (netpoll: epoll_wait failed, nothing will fire again)
// is logged, counted (PollerFailures), reported by PollerErr (the node's
// /readyz answers 503 with it) and moves every stream parked on it back to
// a goroutine of its own (unpark, run by the Hub's enders), where it goes
// on working; from then on no stream parks: they all keep their
// goroutines, as with SetParking(false), until the process restarts.
//
// Lock order: Conn.life, then parkedFD.mu, then Hub.pmu (parkedSSE.mu is
// never held with the others); pmu is never held while calling into a
// stream.

// pollSet is one poller of the Hub and the streams parked on it.
type pollSet struct {
	hub    *Hub
	p      *netpoll.Poller
	refs   int                   // streams holding p (parked, unparked, ending); guarded by Hub.pmu
	parked map[unparker]struct{} // streams p watches; guarded by Hub.pmu
	failed bool                  // p's wait failed; guarded by Hub.pmu
}

// unparker is a stream parked on a poller: unpark moves it to a goroutine
// of its own once the poller failed. It runs on one of the Hub's enders
// and must not block; it does nothing once the stream is ending.
type unparker interface{ unpark() }

// SetLogger sets where the Hub logs (a poller failure). Default: nowhere.
func (h *Hub) SetLogger(l zerolog.Logger) { h.log.Store(&l) }

func (h *Hub) logger() *zerolog.Logger {
	if l := h.log.Load(); l != nil {
		return l
	}
	nop := zerolog.Nop()
	return &nop
}

// PollerFailures counts the failures of the Hub's poller (at most one: no
// poller starts after one failed).
func (h *Hub) PollerFailures() uint64 { return h.pollFailures.Load() }

// PollerErr is why the Hub's poller failed, nil while it did not: streams
// then no longer park, and the node should be restarted.
func (h *Hub) PollerErr() error {
	h.pmu.Lock()
	defer h.pmu.Unlock()
	return h.pollErr
}

// acquirePoller is the Hub's poller for one more parked stream, started by
// the first; nil when parking is off, the platform has none or it failed.
// The poller lives while streams hold it: the last releasePoller closes
// it, so a Hub with no parked stream holds no goroutine.
func (h *Hub) acquirePoller() *pollSet {
	if h.noPark.Load() {
		return nil
	}
	h.pmu.Lock()
	defer h.pmu.Unlock()
	if h.noPoller || h.pollErr != nil {
		return nil
	}
	if h.pset == nil {
		ps := &pollSet{hub: h, parked: map[unparker]struct{}{}}
		p, err := netpoll.New(netpoll.Options{OnFail: func(err error) { h.pollerFailed(ps, err) }})
		if err != nil {
			// unsupported: never again; out of descriptors: the next stream tries again
			h.noPoller = errors.Is(err, netpoll.ErrUnsupported)
			return nil
		}
		ps.p = p
		h.pset = ps
	}
	h.pset.refs++
	return h.pset
}

// releasePoller gives back what acquirePoller gave; the last one closes
// the poller (waiting for its goroutine).
func (h *Hub) releasePoller(ps *pollSet) {
	h.pmu.Lock()
	ps.refs--
	last := ps.refs == 0
	if last && h.pset == ps {
		h.pset = nil
	}
	h.pmu.Unlock()
	if last {
		_ = ps.p.Close()
	}
}

// track records u as parked on ps, false when ps failed already (u must
// then not stay on it).
func (h *Hub) track(ps *pollSet, u unparker) bool {
	h.pmu.Lock()
	defer h.pmu.Unlock()
	if ps.failed {
		return false
	}
	ps.parked[u] = struct{}{}
	return true
}

// untrack forgets u (it left ps).
func (h *Hub) untrack(ps *pollSet, u unparker) {
	h.pmu.Lock()
	delete(ps.parked, u)
	h.pmu.Unlock()
}

// pollerFailed is ps's OnFail, on its goroutine (it must not block): no
// stream parks any more, and those parked move to goroutines.
func (h *Hub) pollerFailed(ps *pollSet, err error) {
	h.pmu.Lock()
	ps.failed = true
	if h.pset == ps {
		h.pset = nil
	}
	h.pollErr = err
	us := make([]unparker, 0, len(ps.parked))
	for u := range ps.parked {
		us = append(us, u)
	}
	clear(ps.parked)
	h.pmu.Unlock()
	h.pollFailures.Add(1)
	h.logger().Error().Err(err).Int("parked", len(us)).
		Msg("transport: the poller failed: parked streams move to goroutines, no stream parks until restart")
	for _, u := range us {
		h.enders.do(u.unpark)
	}
}
