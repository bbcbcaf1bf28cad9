package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/internal/fetchsize"
	"github.com/aep-gateway/aep-gateway/internal/queue"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// Event is one record read from a tenant topic with its decoded routing
// attributes. It is shared by every subscription it is delivered to and must
// not be modified.
type Event struct {
	Record *kgo.Record
	Attrs  aep.Attrs
}

// Delivery is one element of a subscription's stream: an event, or the
// marker that a catch-up has reached the shared tail. It is three words, so
// that a subscription's queue (a channel of Queue deliveries, allocated
// when it starts) costs 24 bytes a slot whether the stream is busy or idle;
// what only the marker carries is behind the Handover pointer.
type Delivery struct {
	// Event is the delivered event; nil for the caught-up marker.
	Event *Event
	// Sequence is the subscription's delivery sequence of Event (1, 2,
	// ...; a gap means events were dropped). For the marker it is the
	// sequence of the last replayed event.
	Sequence uint64
	// Handover is set on the marker only (see CaughtUp); its fields are
	// promoted, so read them only after CaughtUp.
	*Handover
}

// Handover is what the caught-up marker says about the end of a catch-up.
type Handover struct {
	// Fallback marks the end of a catch-up that a lossless subscription
	// fell back to after its queue overflowed, not one it asked for.
	Fallback bool
	// Replayed counts the events the catch-up delivered.
	Replayed uint64
	// Frontier is the position of the handover, one entry per partition:
	// where the tail continues for this subscription.
	Frontier []cursor.PartitionOffset
}

// CaughtUp marks the end of a catch-up: every later delivery comes from
// the shared tail (until a lossless subscription falls behind).
func (d Delivery) CaughtUp() bool { return d.Handover != nil }

// Partition is the event's partition.
func (d Delivery) Partition() int32 { return d.Event.Record.Partition }

// Offset is the event's offset.
func (d Delivery) Offset() int64 { return d.Event.Record.Offset }

// Subscription is one consumer's stream of matching events.
type Subscription struct {
	e        *Engine
	t        *tail
	id       filtering.ID
	filter   *filtering.Filter
	q        *queue.Queue[Delivery]
	lossless bool
	start    []cursor.PartitionOffset // live subscriptions only

	// seq is the last sequence used. The catch-up goroutine owns it until
	// the handover, the tail (under t.mu) after it.
	seq   uint64
	guard []int64 // per-partition first offset the tail delivers; guarded by t.mu
	// woken: queued to quietly in the tail's current dispatch round and
	// listed in t.woken for its one wake-up. Guarded by t.mu.
	woken bool

	// LiveWorkers only. silent: a live subscription's first catch-up,
	// whose handover queues no marker. marks: per partition, the source
	// offset from which the workers forward s's matches (-1 before their
	// marker came); marksReady is closed when none is missing. Guarded by
	// t.mu.
	silent       bool
	marks        []int64
	marksMissing int
	marksReady   chan struct{}
	wake         context.CancelFunc // ends the catch-up's poll when the markers complete

	dropped   atomic.Uint64
	fallbacks atomic.Uint64
	err       atomic.Pointer[error]

	mu        sync.Mutex
	closing   bool               // guarded by mu: no catch-up may start
	cancel    context.CancelFunc // of the latest catch-up; guarded by mu
	catchDone chan struct{}      // closed when the latest catch-up ends; guarded by mu

	finishOnce, closeOnce sync.Once
}

// Deliveries is the subscription's stream, read by one consumer. It ends
// (Next reports ended) when the subscription ends; Err then says why. Its
// buffer grows as deliveries wait in it, up to the subscription's queue
// length: an idle subscription holds none.
func (s *Subscription) Deliveries() *queue.Queue[Delivery] { return s.q }

// Err is why the stream ended: nil after Close, ErrClosed, or a Kafka error
// of a catch-up. It is nil while the stream is open.
func (s *Subscription) Err() error {
	if p := s.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Dropped counts events a lossy subscription lost because its queue was
// full.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Fallbacks counts the times a lossless subscription's queue overflowed and
// it went back to catch-up reading.
func (s *Subscription) Fallbacks() uint64 { return s.fallbacks.Load() }

// Start is where a live subscription (Request.From nil) begins: the tail's
// position when it joined, one entry per partition. Nil for a catch-up
// subscription, whose marker carries the handover position.
func (s *Subscription) Start() []cursor.PartitionOffset { return s.start }

// Close ends the subscription and waits for its catch-up, if any. It is
// idempotent and safe to call concurrently with everything.
func (s *Subscription) Close() {
	s.closeOnce.Do(func() {
		s.stop(nil)
		s.e.release(s.t)
	})
}

// stop marks s closing, cancels its catch-up and waits for it, then takes
// s out of its tail with err.
func (s *Subscription) stop(err error) {
	s.mu.Lock()
	s.closing = true
	cancel, done := s.cancel, s.catchDone
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	s.t.leave(s, err)
}

// finish records err and ends the queue, once.
func (s *Subscription) finish(err error) {
	s.finishOnce.Do(func() {
		if err != nil {
			s.err.Store(&err)
		}
		s.e.metrics.subscriptions.Dec()
		s.q.End()
	})
}

// offerLocked hands ev to s without blocking. Quiet, the consumer is not
// woken now but by the tail's wakeLocked at the end of the round (see
// dispatch). Must hold s.t.mu.
func (s *Subscription) offerLocked(ev *Event, quiet bool) {
	if p := ev.Record.Partition; int(p) < len(s.guard) && ev.Record.Offset < s.guard[p] {
		return // the catch-up delivered it already
	}
	s.seq++
	d := Delivery{Event: ev, Sequence: s.seq}
	if quiet && s.q.OfferQuiet(d) {
		if !s.woken {
			s.woken = true
			s.t.woken = append(s.t.woken, s)
		}
		s.e.metrics.delivered.Inc()
		return
	}
	if !quiet && s.q.Offer(d) {
		s.e.metrics.delivered.Inc()
		return
	}
	if !s.lossless {
		s.dropped.Add(1)
		s.e.metrics.dropped.Inc()
		return
	}
	// Lossless: leave the tail and read again from this event on.
	s.seq--
	from := s.resumeFromLocked(ev.Record.Partition, ev.Record.Offset)
	t := s.t
	if t.index != nil {
		t.index.Remove(s.id)
	}
	delete(t.subs, s.id)
	s.fallbacks.Add(1)
	s.e.metrics.fallbacks.Inc()
	if !s.startCatchUp(from, true) {
		s.finish(ErrClosed) // closing or engine closed: the tail is the last sender
	}
}

// resumeFromLocked is where a lossless subscription that could not take
// the event at offset of partition p continues: that offset on p, and on
// every other partition the first offset the tail has not processed for it
// (its position, or the guard when the guard is ahead). Must hold s.t.mu.
func (s *Subscription) resumeFromLocked(p int32, offset int64) []cursor.PartitionOffset {
	out := make([]cursor.PartitionOffset, len(s.t.pos))
	for q, pos := range s.t.pos {
		if q < len(s.guard) && s.guard[q] > pos {
			pos = s.guard[q]
		}
		if int32(q) == p {
			pos = offset
		}
		out[q] = cursor.PartitionOffset{Partition: int32(q), Offset: pos}
	}
	return out
}

// startCatchUp starts a catch-up goroutine from the given position, unless
// the subscription is closing or the engine closed. May be called with
// s.t.mu held (lock order: tail.mu, Subscription.mu, Engine.goMu).
func (s *Subscription) startCatchUp(from []cursor.PartitionOffset, fallback bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.e.goMu.Lock()
	defer s.e.goMu.Unlock()
	if s.e.goClosed {
		return false
	}
	ctx, cancel := context.WithCancel(s.e.ctx)
	done := make(chan struct{})
	s.cancel, s.catchDone = cancel, done
	s.e.wg.Add(1)
	go s.catchUp(ctx, from, done, fallback)
	return true
}

// catchUp reads from on its own client, delivering matches with blocking
// sends, until join succeeds. It ends the subscription itself when it stops
// without joining.
func (s *Subscription) catchUp(ctx context.Context, from []cursor.PartitionOffset, done chan struct{}, fallback bool) {
	defer s.e.wg.Done()
	defer close(done)
	s.e.metrics.catchUps.Inc()
	err := s.readUntilJoined(ctx, from, fallback)
	s.e.metrics.catchUps.Dec()
	if err == nil {
		return
	}
	if ctx.Err() != nil {
		err = nil
		if s.e.ctx.Err() != nil {
			err = ErrClosed
		}
	}
	s.finish(err)
}

func (s *Subscription) readUntilJoined(ctx context.Context, from []cursor.PartitionOffset, fallback bool) error {
	next := make(map[int32]int64, len(from))
	offs := make(map[int32]kgo.Offset, len(from))
	for _, po := range from {
		next[po.Partition] = po.Offset
		offs[po.Partition] = kgo.NewOffset().At(po.Offset)
	}
	var cl *kgo.Client
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	var replayed uint64
	var attrs aep.Attrs
	prepaid := 0 // bytes paid to the pacer before the first fetch
	sizer := fetchsize.New(s.e.cfg.ReaderFetchBytes)
	held := &queueHold{e: s.e, tenant: s.t.tenant, q: s.q}
	defer held.releaseAll()
	// Forwarded feed: a live subscription's first catch-up waits for the
	// workers' markers before it reads (they usually come before it would
	// have read anything); a resume or a fallback has a replay to read and
	// reads at once.
	waited := s.marksReady == nil || fallback || !s.silent
	var hand handover
	for {
		if err := s.waitRoom(ctx); err != nil {
			return err
		}
		marker := (fallback || !s.silent) && !hand.done
		frontier, err := s.t.join(s, next, replayed, marker, fallback)
		if err != nil || frontier != nil {
			return err
		}
		// join may have added partitions of the topic that this catch-up
		// predates: read them too
		var add map[int32]kgo.Offset
		for p, o := range next {
			if _, ok := offs[p]; !ok {
				offs[p] = kgo.NewOffset().At(o)
				if add == nil {
					add = map[int32]kgo.Offset{}
				}
				add[p] = offs[p]
			}
		}
		if add != nil && cl != nil {
			cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{s.t.topic: add})
		}
		if marker {
			hand.early(ctx, s, next, replayed, fallback)
		}
		if !waited {
			// Forwarded feed: the workers' markers usually come before a
			// reader would have read anything; read only what they miss.
			waited = true
			if s.waitMarks(ctx) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if cl == nil {
			// The first fetch is paid before it is made: a tenant opening
			// many catch-ups at once starts them at its pace, not all at once.
			prepaid = int(s.e.cfg.ReaderFetchBytes)
			if err := s.e.pacer.Wait(ctx, s.t.tenant, prepaid); err != nil {
				return err
			}
			if cl, err = kgo.NewClient(append(s.e.readerOpts(s.t.topic, offs), sizer.Opts()...)...); err != nil {
				return err
			}
		}
		fs := s.poll(ctx, cl)
		sizer.Adjust(cl) // the next fetch decodes to about ReaderFetchBytes
		if err := ctx.Err(); err != nil {
			return err
		}
		// Every fetch is paid (decoded bytes, matching or not) before its
		// events are queued and the next poll: the tenant's catch-ups read
		// at its rate (docs/security.md "Catch-up pacing").
		fetched := 0
		for it := fs.RecordIter(); !it.Done(); {
			fetched += int(recordBytes(it.Next()))
		}
		if err := s.e.pacer.Wait(ctx, s.t.tenant, fetched-prepaid); err != nil {
			return err
		}
		prepaid = 0
		fs.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return // woken by the workers' markers
			}
			s.e.cfg.Logger.Warn().Err(err).Str("topic", topic).Int32("partition", p).Msg("engine: catch-up fetch")
		})
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			next[r.Partition] = r.Offset + 1
			if partitioning.DecodeHeaders(r.Headers, &attrs) != nil || !s.filter.Match(&attrs) {
				continue
			}
			ev := &Event{Record: r, Attrs: attrs}
			attrs.Ext = nil
			if err := held.take(ctx, recordBytes(r)); err != nil {
				return err
			}
			s.seq++
			replayed++
			if err := s.q.Push(ctx, Delivery{Event: ev, Sequence: s.seq}); err != nil {
				return err
			}
			s.e.metrics.delivered.Inc()
		}
	}
}

// waitRoom waits until the queue has room for the caught-up marker. The
// catch-up is the only sender, so room it sees stays until it sends.
func (s *Subscription) waitRoom(ctx context.Context) error {
	return s.q.WaitRoom(ctx)
}

// queueHold is what a catch-up holds of the engine's memory budget: the
// decoded bytes of the events it queued that its consumer has not taken
// yet (oldest first: the queue is a FIFO, and events queued before the
// catch-up began come before its own).
type queueHold struct {
	e      *Engine
	tenant string
	q      *queue.Queue[Delivery]
	sizes  []int64
}

// take waits until the budget grants n more bytes, giving back first what
// the consumer took meanwhile.
func (h *queueHold) take(ctx context.Context, n int64) error {
	var tick *time.Timer
	defer func() {
		if tick != nil {
			tick.Stop()
		}
	}()
	waited := false
	for {
		h.releaseTaken()
		if h.e.budget.TryAcquire(h.tenant, n) {
			h.sizes = append(h.sizes, n)
			return nil
		}
		if !waited {
			waited = true
			h.e.metrics.budgetWaits.Inc()
		}
		// The consumer frees bytes without telling the budget: look again
		// after a while, or when another holder gives bytes back.
		if tick == nil {
			tick = time.NewTimer(budgetPoll)
		} else {
			tick.Reset(budgetPoll)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-h.e.budget.Changed():
		case <-tick.C:
		}
	}
}

// budgetPoll is how often a catch-up waiting for the budget looks whether
// its consumer took events.
const budgetPoll = 20 * time.Millisecond

func (h *queueHold) releaseTaken() {
	taken := len(h.sizes) - h.q.Len()
	if taken <= 0 {
		return
	}
	for _, n := range h.sizes[:taken] {
		h.e.budget.Release(h.tenant, n)
	}
	h.sizes = append(h.sizes[:0], h.sizes[taken:]...)
}

// releaseAll gives everything back when the catch-up ends: what it queued
// is then the stream's, bounded by its queue's length.
func (h *queueHold) releaseAll() {
	for _, n := range h.sizes {
		h.e.budget.Release(h.tenant, n)
	}
	h.sizes = nil
}

// recordBytes is about what a record holds in memory decoded.
func recordBytes(r *kgo.Record) int64 {
	n := len(r.Key) + len(r.Value) + 128
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 32
	}
	return int64(n)
}
