package ingest

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// Pipe bounds, the defaults of PipeConfig.
const (
	// DefaultPipeEvents bounds the events a Pipe queues behind the write
	// in flight (and so the events of one write).
	DefaultPipeEvents = 64
	// DefaultPipeBytes bounds their bytes; one event of any size is
	// always taken when none is queued.
	DefaultPipeBytes = 256 << 10
)

// ErrPipe is the WriteErr of events a Pipe could not hand to its Func
// (the Func panicked, or answered for fewer events than it was given).
var ErrPipe = errors.New("ingest: events not written")

// PipeConfig configures a Pipe. Func, Tenant and Done are required.
type PipeConfig struct {
	Func   Func
	Tenant tenant.Tenant
	// Context is handed to Func (its writes outlive a cancelled one, as
	// the gateway's ingest's do).
	Context context.Context
	// Done receives each event's outcome, in the order the events were
	// submitted, on the Pipe's worker goroutine. It may block (a binding
	// queueing its answer); the Pipe waits for it.
	Done func(id string, r *Result)
	// Go runs the worker while events wait, as a goroutine its caller
	// joins (transport.Conn.Run); false when it cannot (the connection
	// is ending): the events are then written on the submitting
	// goroutine. Nil: a goroutine of the Pipe's own.
	Go func(func()) bool
	// Panicked, when set, is called after Done panicked (a bug in the
	// binding), as the reader's recovery does for a message's handler:
	// the binding closes the connection 1011. The Pipe logs the panic and
	// goes on with the next event.
	Panicked func()
	// MaxEvents and MaxBytes bound what waits behind the write in flight
	// (defaults DefaultPipeEvents, DefaultPipeBytes); Submit waits for
	// room beyond them.
	MaxEvents, MaxBytes int
	Logger              zerolog.Logger
}

// Pipe writes one connection's events through a Func in the order they
// were submitted, without making the connection's reader wait for each
// write: the events submitted while a write is in flight go together in
// the next one. An emitter that sends faster than the log acknowledges
// has its events written in batches (one Kafka round trip for many); one
// that waits for each answer waits for its own write and nothing more.
//
// Each event still stands alone (Func's contract: the gateway's ingest
// applies the tenant's rate limit event by event), so a burst is taken as
// when each frame was written before the next was read. Done reports
// every submitted event once, in order.
//
// Goroutines: the submitter (one at a time: the connection's reader),
// and a worker that runs while events wait and exits when none do (so a
// parked connection holds none). Close waits for it. Safe for one
// submitter; Drain and Close may be called from any goroutine but the
// worker's.
type Pipe struct {
	cfg PipeConfig

	mu      sync.Mutex
	changed sync.Cond // the queue shrank, or the worker stopped
	queue   []pending // guarded by mu
	bytes   int       // guarded by mu
	running bool      // a worker owns the queue; guarded by mu
	closed  bool      // guarded by mu
	own     sync.WaitGroup
}

type pending struct {
	event []byte
	id    string
}

// NewPipe returns a Pipe; no goroutine runs until an event is submitted.
func NewPipe(cfg PipeConfig) *Pipe {
	if cfg.MaxEvents <= 0 {
		cfg.MaxEvents = DefaultPipeEvents
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultPipeBytes
	}
	if cfg.Context == nil {
		cfg.Context = context.Background()
	}
	p := &Pipe{cfg: cfg}
	p.changed.L = &p.mu
	return p
}

// Submit queues event (id names it to Done), waiting while the queue is
// full; the worker writes it. The Pipe keeps event until Done: the
// caller must not reuse it. False after Close: the event was not taken.
func (p *Pipe) Submit(event []byte, id string) bool {
	p.mu.Lock()
	for !p.closed && len(p.queue) > 0 && (len(p.queue) >= p.cfg.MaxEvents || p.bytes+len(event) > p.cfg.MaxBytes) {
		p.changed.Wait()
	}
	if p.closed {
		p.mu.Unlock()
		return false
	}
	p.queue = append(p.queue, pending{event: event, id: id})
	p.bytes += len(event)
	start := !p.running
	p.running = true
	p.mu.Unlock()
	if start {
		p.start()
	}
	return true
}

// start runs the worker: on cfg.Go, on a goroutine of the Pipe's own, or
// here when cfg.Go refuses (the connection is ending: nothing may start).
func (p *Pipe) start() {
	if p.cfg.Go == nil {
		p.own.Add(1)
		go func() {
			defer p.own.Done()
			p.work()
		}()
		return
	}
	if !p.cfg.Go(p.work) {
		p.work()
	}
}

// Drain waits until every event submitted so far has been reported to
// Done: what the connection answers next comes after them. A nil Pipe (a
// connection that never emitted) has nothing to wait for.
func (p *Pipe) Drain() {
	if p == nil {
		return
	}
	p.mu.Lock()
	for p.running {
		p.changed.Wait()
	}
	p.mu.Unlock()
}

// Close takes no more events and waits until those submitted have been
// written and reported. Idempotent; nil-safe as Drain.
func (p *Pipe) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	p.changed.Broadcast() // a Submit waiting for room gives up
	for p.running {
		p.changed.Wait()
	}
	p.mu.Unlock()
	p.own.Wait()
}

// work writes the queue, a batch at a time, until it is empty.
func (p *Pipe) work() {
	var (
		batch  []pending
		events [][]byte
	)
	for {
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.running = false
			p.changed.Broadcast()
			p.mu.Unlock()
			return
		}
		// Swap the buffers: the submitter appends to the emptied one.
		batch, p.queue = p.queue, batch[:0]
		p.bytes = 0
		p.changed.Broadcast()
		p.mu.Unlock()

		events = events[:0]
		for _, e := range batch {
			events = append(events, e.event)
		}
		res := p.call(events)
		for i := range batch {
			p.done(batch[i].id, &res[i])
		}
		clear(batch) // the events are the callers' again
		clear(events)
	}
}

// done reports one outcome; a panic in Done is logged and handed to
// Panicked instead of ending the process (the worker is not the reader,
// whose handler runs under the transport's recovery).
func (p *Pipe) done(id string, r *Result) {
	defer func() {
		if v := recover(); v != nil {
			p.cfg.Logger.Error().Interface("panic", v).Bytes("stack", debug.Stack()).Msg("ingest: pipe's Done panicked")
			if p.cfg.Panicked != nil {
				p.cfg.Panicked()
			}
		}
	}()
	p.cfg.Done(id, r)
}

// call is one call of the Func; a panic or a short answer fails the
// events it did not answer for.
func (p *Pipe) call(events [][]byte) (res []Result) {
	defer func() {
		if v := recover(); v != nil {
			p.cfg.Logger.Error().Interface("panic", v).Bytes("stack", debug.Stack()).Msg("ingest: pipe's write panicked; its events are failed")
			res = failed(len(events), fmt.Errorf("%w: the write panicked", ErrPipe))
		}
	}()
	res = p.cfg.Func(p.cfg.Context, p.cfg.Tenant, events)
	if len(res) != len(events) {
		p.cfg.Logger.Error().Int("events", len(events)).Int("results", len(res)).Msg("ingest: pipe's write answered for a different number of events; they are failed")
		res = failed(len(events), fmt.Errorf("%w: %d results for %d events", ErrPipe, len(res), len(events)))
	}
	return res
}

func failed(n int, err error) []Result {
	res := make([]Result, n)
	for i := range res {
		res[i] = Result{WriteErr: err, Partition: -1, Offset: -1}
	}
	return res
}
