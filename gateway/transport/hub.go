package transport

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/internal/gopool"
)

var (
	// ErrShuttingDown refuses a stream once Shutdown has started.
	ErrShuttingDown = errors.New("transport: shutting down")
	// ErrTenantLimit refuses a stream over the tenant's cap.
	ErrTenantLimit = errors.New("transport: the tenant holds the most streams allowed")
)

// Hub tracks the open streams (SSE responses and WebSocket connections) of
// every binding on this node: one per-tenant cap for all of them, and one
// Shutdown that ends them all and waits. The zero value is not usable;
// call NewHub. A Hub is safe for concurrent use.
type Hub struct {
	maxPerTenant int

	mu       sync.Mutex
	closed   bool
	perTen   map[string]int       // open streams per tenant; guarded by mu
	live     map[*Stream]struct{} // guarded by mu
	wg       sync.WaitGroup       // one per open stream
	shutdown chan struct{}        // closed when Shutdown starts

	pmu      sync.Mutex
	pset     *pollSet // the poller streams park on now (nil: none started); guarded by pmu
	noPoller bool     // the platform has no poller; guarded by pmu
	pollErr  error    // the poller failed: nothing parks any more; guarded by pmu
	noPark   atomic.Bool
	enders   runner       // ends parked streams whose client left, unparks them when the poller fails
	wakers   *gopool.Pool // run parked streams' wake-ups (writes, reads) on reused goroutines
	log      atomic.Pointer[zerolog.Logger]

	refusedLimit, refusedShutdown atomic.Uint64
	pollFailures                  atomic.Uint64
	parked                        atomic.Int64 // SSE streams parked now
	parkedWS                      atomic.Int64 // WebSockets on the poller now
}

// Parked is the number of SSE streams parked now (held without a
// goroutine, see Park); the other open streams run in goroutines.
func (h *Hub) Parked() int { return int(h.parked.Load()) }

// ParkedWebSockets is the number of WebSocket connections held on the
// Hub's poller now (parked once ready: a reader, writer or pump runs only
// while it has work).
func (h *Hub) ParkedWebSockets() int { return int(h.parkedWS.Load()) }

// Refusals counts the streams Enter refused, by reason: over the tenant's
// cap (ErrTenantLimit) and after Shutdown began (ErrShuttingDown).
func (h *Hub) Refusals() (tenantLimit, shuttingDown uint64) {
	return h.refusedLimit.Load(), h.refusedShutdown.Load()
}

// maxEnders bounds the goroutines that end parked streams whose client
// left (unsubscribe, close, Leave): short work, done by a few.
const maxEnders = 16

// A parked stream's wake-up (write what is queued, read a message) runs on
// a goroutine of the Hub's pool that finished one recently, keeping its
// grown stack, or on a new one: never behind another wake-up. Up to
// maxIdleWakers wait for work, each for wakerLinger (at most 256 stacks,
// ~2 MiB, and none a moment after the traffic stops).
const (
	maxIdleWakers = 256
	wakerLinger   = 500 * time.Millisecond
)

// NewHub returns a Hub that admits at most maxPerTenant open streams per
// tenant (every binding counted together); zero or negative means no cap.
func NewHub(maxPerTenant int) *Hub {
	return &Hub{
		maxPerTenant: maxPerTenant, perTen: map[string]int{}, live: map[*Stream]struct{}{}, shutdown: make(chan struct{}),
		enders: runner{max: maxEnders}, wakers: gopool.New(maxIdleWakers, wakerLinger),
	}
}

// Stream is one admitted stream; Leave it exactly once when it ends.
type Stream struct {
	h        *Hub
	tenant   string
	onStop   func()
	stopOnce sync.Once
}

// Enter admits a stream of tenant. onShutdown (may be nil) is called once
// when Shutdown starts, from Shutdown's goroutine: it must only start the
// stream's end (queue last words, cancel), not wait for it. The error is
// ErrShuttingDown or ErrTenantLimit.
func (h *Hub) Enter(tenant string, onShutdown func()) (*Stream, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		h.refusedShutdown.Add(1)
		return nil, ErrShuttingDown
	}
	if h.maxPerTenant > 0 && h.perTen[tenant] >= h.maxPerTenant {
		h.refusedLimit.Add(1)
		return nil, ErrTenantLimit
	}
	h.perTen[tenant]++
	s := &Stream{h: h, tenant: tenant, onStop: onShutdown}
	h.live[s] = struct{}{}
	h.wg.Add(1)
	return s, nil
}

// OnShutdown sets what the stream does when the Hub shuts down (it must
// only start the stream's end, not wait for it), for a stream whose
// connection exists only after it was admitted. When shutdown has already
// begun, f runs at once.
func (s *Stream) OnShutdown(f func()) {
	h := s.h
	h.mu.Lock()
	closed := h.closed
	if !closed {
		s.onStop = f
	}
	h.mu.Unlock()
	if closed {
		f()
	}
}

// Leave ends the stream's admission. Idempotent.
func (s *Stream) Leave() {
	s.stopOnce.Do(func() {
		h := s.h
		h.mu.Lock()
		if h.perTen[s.tenant]--; h.perTen[s.tenant] <= 0 {
			delete(h.perTen, s.tenant)
		}
		delete(h.live, s)
		h.mu.Unlock()
		h.wg.Done()
	})
}

// Take counts one more stream of tenant under the same cap, for a stream
// that rides on an admitted connection (a WebSocket connection's second
// and later subscriptions): ErrTenantLimit past the cap, ErrShuttingDown
// once Shutdown started. Give undoes it, once per Take.
func (h *Hub) Take(tenant string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		h.refusedShutdown.Add(1)
		return ErrShuttingDown
	}
	if h.maxPerTenant > 0 && h.perTen[tenant] >= h.maxPerTenant {
		h.refusedLimit.Add(1)
		return ErrTenantLimit
	}
	h.perTen[tenant]++
	return nil
}

// Give gives back what Take took.
func (h *Hub) Give(tenant string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.perTen[tenant]--; h.perTen[tenant] <= 0 {
		delete(h.perTen, tenant)
	}
}

// ShuttingDown is closed when Shutdown starts; SSE loops take it as their
// SSEConfig.Shutdown.
func (h *Hub) ShuttingDown() <-chan struct{} { return h.shutdown }

// Open is the number of open streams of tenant.
func (h *Hub) Open(tenant string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.perTen[tenant]
}

// Shutdown refuses new streams, tells every open one to end (its
// onShutdown) and waits until all have left, or ctx ends. It is idempotent
// and returns ctx.Err() when ctx ended first.
func (h *Hub) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	var stops []func()
	if !h.closed {
		h.closed = true
		close(h.shutdown)
		for s := range h.live {
			if s.onStop != nil {
				stops = append(stops, s.onStop)
			}
		}
	}
	h.mu.Unlock()
	for _, f := range stops {
		f()
	}
	done := make(chan struct{})
	go func() {
		h.wg.Wait()
		h.enders.wait() // the last Leave ran on one of them
		h.wakers.Close()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SetParking turns parking of idle streams on (the default) or off: off,
// every stream keeps its goroutine (the path HTTP/2, TLS and non-Linux
// take anyway). Streams already parked stay parked.
func (h *Hub) SetParking(on bool) { h.noPark.Store(!on) }
