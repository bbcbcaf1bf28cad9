package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// tail is the shared reader of one tenant topic on this node: it consumes
// every partition from where the log ended when it started, and offers each
// record to the subscriptions that match it.
type tail struct {
	e      *Engine
	tenant string
	topic  string
	cl     *kgo.Client
	index  *filtering.Index
	cancel context.CancelFunc
	done   chan struct{}
	refs   int // guarded by Engine.mu

	// scratch state of the run goroutine only
	ids   []filtering.ID
	attrs aep.Attrs

	mu          sync.Mutex
	pos         []int64                        // next offset to dispatch, per partition; guarded by mu
	subs        map[filtering.ID]*Subscription // joined subscriptions; guarded by mu
	stopped     bool                           // guarded by mu
	undecodable uint64                         // records whose headers did not decode; guarded by mu
	woken       []*Subscription                // queued to in this dispatch round, not yet woken; guarded by mu
	// added holds the partitions added to the topic while the tail ran,
	// with the offset it began reading each at (their log start then): a
	// catch-up that does not read one itself reads it from there before
	// joining (join). Guarded by mu.
	added map[int32]int64
	// watched is closed when the partition watcher (tail mode) has
	// stopped; nil when none runs.
	watched chan struct{}

	// LiveWorkers only (feed non-nil, cl and index nil): the registered
	// subscriptions, joined or catching up, and the forwarded records
	// dropped as duplicates. pos is the next source offset the feed takes.
	feed       *feed
	reg        map[filtering.ID]*Subscription // guarded by mu
	duplicates uint64                         // guarded by mu
}

// startTail lists topic's end offsets and starts reading every partition
// from there.
func startTail(ctx context.Context, e *Engine, tenant, topic string) (*tail, error) {
	ends, err := e.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("engine: end offsets of %s: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("engine: end offsets of %s: %w", topic, err)
	}
	byPart, ok := ends[topic]
	if !ok || len(byPart) == 0 {
		return nil, fmt.Errorf("engine: topic %s has no partitions", topic)
	}
	pos := make([]int64, len(byPart))
	offs := make(map[int32]kgo.Offset, len(byPart))
	for p, lo := range byPart {
		if int(p) >= len(pos) || p < 0 {
			return nil, fmt.Errorf("engine: topic %s: partition %d out of range", topic, p)
		}
		pos[p] = lo.Offset
		offs[p] = kgo.NewOffset().At(lo.Offset)
	}
	if e.feed != nil {
		t := &tail{
			e: e, tenant: tenant, topic: topic, cancel: func() {}, done: make(chan struct{}), pos: pos,
			subs: map[filtering.ID]*Subscription{}, feed: e.feed, reg: map[filtering.ID]*Subscription{},
		}
		close(t.done)
		return t, nil
	}
	opts := append(append(e.metadataOpts(), e.cfg.ClientOpts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offs}))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("engine: tail client: %w", err)
	}
	rctx, cancel := context.WithCancel(e.ctx)
	t := &tail{
		e: e, tenant: tenant, topic: topic, cl: cl, index: filtering.NewIndex(), cancel: cancel,
		done: make(chan struct{}), pos: pos, subs: map[filtering.ID]*Subscription{},
	}
	go t.run(rctx)
	if every := e.cfg.PartitionCheck; every > 0 {
		t.watched = make(chan struct{})
		go t.watchPartitions(rctx, every)
	}
	return t, nil
}

// watchPartitions looks every interval for partitions added to the topic
// and reads them from their log start (grow), until ctx ends.
func (t *tail) watchPartitions(ctx context.Context, every time.Duration) {
	defer close(t.watched)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t.mu.Lock()
		known := int32(len(t.pos))
		t.mu.Unlock()
		// (a node holds a tail per tenant it serves: one metadata request
		// per check, the offsets only when the topic grew)
		st, grown, err := cursor.GrownTopicState(ctx, t.e.adm, t.topic, known)
		if err != nil && ctx.Err() == nil {
			t.e.cfg.Logger.Debug().Err(err).Str("topic", t.topic).Msg("engine: partition check")
		}
		if grown {
			t.grow(st)
		}
	}
}

// grow starts reading the partitions st has beyond the tail's, from their
// log start: every record of an added partition was written after the
// tail started, so none is skipped. A session whose key now hashes to a
// new partition goes on there (docs/operations-kafka.md, "Adding
// partitions").
func (t *tail) grow(st cursor.TopicState) {
	t.mu.Lock()
	from := int32(len(t.pos))
	if st.Partitions <= from || t.stopped {
		t.mu.Unlock()
		return
	}
	add := make(map[int32]kgo.Offset, st.Partitions-from)
	if t.added == nil {
		t.added = map[int32]int64{}
	}
	for p := from; p < st.Partitions; p++ {
		start := st.Start[p]
		t.pos = append(t.pos, start)
		t.added[p] = start
		add[p] = kgo.NewOffset().At(start)
	}
	t.mu.Unlock()
	t.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{t.topic: add})
	t.e.cfg.Logger.Warn().Str("topic", t.topic).Int32("partitions_before", from).Int32("partitions", st.Partitions).
		Msg("engine: partitions were added to the topic; reading them from their start (sessions whose key now maps to a new partition continue there)")
}

func (t *tail) run(ctx context.Context) {
	defer close(t.done)
	t.e.pollLoop(ctx, t.cl, "engine: tail fetch", t.dispatch)
}

// pollLoop polls cl and hands each batch to handle until ctx ends or cl
// closes, logging fetch errors as what.
func (e *Engine) pollLoop(ctx context.Context, cl *kgo.Client, what string, handle func(kgo.Fetches)) {
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachError(func(topic string, p int32, err error) {
			e.cfg.Logger.Warn().Err(err).Str("topic", topic).Int32("partition", p).Msg(what)
		})
		handle(fs)
	}
}

// dispatch offers every record of fs to the subscriptions it matches. It
// holds t.mu for the whole batch: offers never block, and joins see a
// consistent position.
//
// Subscribers are woken once per round of up to wakeEvery records, not
// once per record: a parked stream woken by a fetch's first record would
// otherwise write the fetch's records one system call each, racing the
// loop that queues them. The round costs the first record of a fetch the
// time to queue the others of its round (microseconds each).
func (t *tail) dispatch(fs kgo.Fetches) {
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.wakeLocked()
	n := 0
	for it := fs.RecordIter(); !it.Done(); {
		if n++; n%wakeEvery == 0 {
			t.wakeLocked()
		}
		r := it.Next()
		if int(r.Partition) >= len(t.pos) {
			continue
		}
		t.pos[r.Partition] = r.Offset + 1
		if err := partitioning.DecodeHeaders(r.Headers, &t.attrs); err != nil {
			t.undecodable++
			continue
		}
		t.ids = t.index.Match(&t.attrs, t.ids[:0])
		if len(t.ids) == 0 {
			continue
		}
		ev := &Event{Record: r, Attrs: t.attrs}
		t.attrs.Ext = nil // ev owns the extension slice now
		for _, id := range t.ids {
			if s := t.subs[id]; s != nil {
				s.offerLocked(ev, true)
			}
		}
	}
}

// wakeEvery bounds a dispatch round: what a subscriber's first record of a
// large fetch waits for the others.
const wakeEvery = 64

// wakeLocked wakes every subscription queued to since the last call, once
// each. Must hold t.mu.
func (t *tail) wakeLocked() {
	for i, s := range t.woken {
		s.woken = false
		s.q.Wake()
		t.woken[i] = nil
	}
	t.woken = t.woken[:0]
}

// join registers s with the tail if next stands at or past the tail's
// position on every partition it names. The guard of each partition is the
// larger of the two: the tail delivers to s only offsets at or past it. A
// catch-up (marker true) also queues the caught-up marker, for which the
// caller has made room. join returns the guard frontier, or nil when s must
// read further on its own.
func (t *tail) join(s *Subscription, next map[int32]int64, replayed uint64, marker, fallback bool) ([]cursor.PartitionOffset, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return nil, ErrClosed
	}
	if t.feed != nil && s.marksMissing > 0 {
		return nil, nil // the workers have not answered the registration yet
	}
	if next != nil && t.catchUpAddedLocked(next) {
		return nil, nil // the catch-up reads the added partitions first
	}
	guard := make([]int64, len(t.pos))
	for p, pos := range t.pos {
		if t.feed != nil && s.marks[p] > pos {
			pos = s.marks[p] // the workers forward s's matches from here on
		}
		guard[p] = pos
		if n, ok := next[int32(p)]; ok {
			if n < pos {
				return nil, nil
			}
			guard[p] = n
		}
	}
	frontier := make([]cursor.PartitionOffset, len(guard))
	for p, g := range guard {
		frontier[p] = cursor.PartitionOffset{Partition: int32(p), Offset: g}
	}
	if marker {
		if !s.q.Offer(Delivery{Sequence: s.seq, Handover: &Handover{Fallback: fallback, Replayed: replayed, Frontier: frontier}}) {
			return nil, nil // the caller makes room and tries again
		}
	}
	s.guard = guard
	t.subs[s.id] = s
	if t.index != nil {
		t.index.Add(s.id, s.filter)
	}
	return frontier, nil
}

// catchUpAddedLocked adds to next, a catch-up's positions, the partitions
// added while the tail ran that it does not read (its start predates
// them), at the offset the tail began reading them: the tail already
// dispatched what lies before its position there. True when it added any.
func (t *tail) catchUpAddedLocked(next map[int32]int64) bool {
	more := false
	for p, start := range t.added {
		if _, ok := next[p]; !ok {
			next[p] = start
			more = true
		}
	}
	return more
}

// leave unregisters s (if it joined) and closes its channel.
func (t *tail) leave(s *Subscription, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reg != nil && t.reg[s.id] == s {
		delete(t.reg, s.id)
		t.feed.unregister(s)
	}
	t.evictLocked(s, err)
}

// evictLocked removes s and ends it with err. Must hold t.mu.
func (t *tail) evictLocked(s *Subscription, err error) {
	if t.subs[s.id] == s {
		if t.index != nil {
			t.index.Remove(s.id)
		}
		delete(t.subs, s.id)
	}
	s.finish(err)
}

// stop ends the reader, waits for it, and ends every joined subscription
// with err.
func (t *tail) stop(err error) {
	t.cancel()
	<-t.done
	if t.watched != nil {
		<-t.watched
	}
	if t.cl != nil {
		t.cl.Close()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	clear(t.reg) // the feed tombstoned the node's lease: the workers drop them all
	for _, s := range t.subs {
		t.evictLocked(s, err)
	}
}
