package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/cursor"

	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/forward"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// LiveDelivery is how live events reach a node.
type LiveDelivery string

const (
	// LiveTail (the default): one shared tail reader per tenant topic on
	// every node that holds a live stream of the tenant.
	LiveTail LiveDelivery = "tail"
	// LiveWorkers: the node registers its live subscriptions in the
	// registry topic and reads the records filter workers forward to its
	// partition of the delivery topic (package gateway/forward,
	// gateway/filterworker).
	LiveWorkers LiveDelivery = "workers"
)

// ParseLiveDelivery parses a --live-delivery value; "" is LiveTail.
func ParseLiveDelivery(s string) (LiveDelivery, error) {
	switch LiveDelivery(s) {
	case "", LiveTail:
		return LiveTail, nil
	case LiveWorkers:
		return LiveWorkers, nil
	}
	return "", fmt.Errorf("engine: live delivery %q: want tail or workers", s)
}

// Defaults of ForwardConfig.
const (
	DefaultLeaseInterval = 10 * time.Second
	DefaultMarkerWait    = 2 * time.Second
)

// ForwardConfig configures LiveWorkers. Zero fields mean the defaults.
type ForwardConfig struct {
	// RegistryTopic and DeliveryTopic default to forward.DefaultRegistryTopic
	// and forward.DefaultDeliveryTopic; the workers must use the same.
	RegistryTopic, DeliveryTopic string
	// LeaseInterval is how often the node rewrites its registry lease; the
	// lease holds for three intervals. Zero means DefaultLeaseInterval.
	LeaseInterval time.Duration
	// MarkerWait is how long a new subscription waits for the workers'
	// markers before it reads its tenant topic on its own catch-up client
	// (until the markers come). Zero means DefaultMarkerWait.
	MarkerWait time.Duration
	// Ensure, when set, provisions the two topics before the node's feed
	// starts (forward.Topics.Ensure); its error fails the Subscribe.
	Ensure func(context.Context) error
}

func (c *ForwardConfig) fill() {
	if c.RegistryTopic == "" {
		c.RegistryTopic = forward.DefaultRegistryTopic
	}
	if c.DeliveryTopic == "" {
		c.DeliveryTopic = forward.DefaultDeliveryTopic
	}
	if c.LeaseInterval <= 0 {
		c.LeaseInterval = DefaultLeaseInterval
	}
	if c.MarkerWait <= 0 {
		c.MarkerWait = DefaultMarkerWait
	}
}

// feed is a node's reader of its delivery partition in LiveWorkers mode:
// it hands forwarded records and markers to the tenant tails (which have no
// Kafka client of their own in this mode), and keeps the node's lease in the
// registry. It owns three goroutines (run, leases, the registry writer's
// run), stopped and waited for by stop.
type feed struct {
	e      *Engine
	cfg    ForwardConfig
	inc    string // this process's incarnation of the node
	part   int32
	cl     *kgo.Client
	reg    *registryWriter
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	tails map[string]*tail // by source topic; guarded by mu; never removed

	// scratch state of the run goroutine only
	fw forward.Forwarded
}

// startFeed finds the node's delivery partition and its end, writes the
// lease, and starts reading from that end.
func startFeed(ctx context.Context, e *Engine) (*feed, error) {
	cfg := e.cfg.Forward
	if cfg.Ensure != nil {
		if err := cfg.Ensure(ctx); err != nil {
			return nil, fmt.Errorf("engine: workers mode topics: %w", err)
		}
	}
	topic := cfg.DeliveryTopic
	ends, err := e.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("engine: delivery topic %s: %w", topic, err)
	}
	n := int32(len(ends[topic]))
	if n == 0 {
		return nil, fmt.Errorf("engine: delivery topic %s has no partitions (is it provisioned?)", topic)
	}
	part := forward.Partition(e.node, n)
	end, ok := ends.Lookup(topic, part)
	if !ok {
		return nil, fmt.Errorf("engine: delivery topic %s: no end offset for partition %d", topic, part)
	}
	f := &feed{e: e, cfg: cfg, inc: ulid.Make().String(), part: part, tails: map[string]*tail{}}
	if err := f.writeLease(ctx, false); err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), e.cfg.ClientOpts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {part: kgo.NewOffset().At(end.Offset)}}))...)
	if err != nil {
		return nil, fmt.Errorf("engine: delivery client: %w", err)
	}
	f.cl = cl
	f.reg = newRegistryWriter(f)
	rctx, cancel := context.WithCancel(e.ctx)
	f.cancel = cancel
	f.wg.Add(3)
	go f.run(rctx)
	go f.leases(rctx)
	go f.reg.run(rctx)
	return f, nil
}

// warmFeed starts the node's feed when the engine starts, rather than at
// its first live stream: provisioning the workers' topics and writing the
// lease takes a few hundred milliseconds on a real broker, and a client
// that opens the node's first stream and then publishes would otherwise
// publish before its stream's start and miss its own events (dialect R's
// live.js ingest-fanout check on a fresh node). A failure is logged; the
// first stream tries again. Owned by the engine's WaitGroup.
func (e *Engine) warmFeed() {
	defer e.wg.Done()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.feed != nil {
		return
	}
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	f, err := startFeed(ctx, e)
	if err != nil {
		if e.ctx.Err() == nil {
			e.cfg.Logger.Warn().Err(err).Msg("engine: workers mode feed not started (the first live stream tries again)")
		}
		return
	}
	e.feed = f
}

// writeLease writes (or, gone, tombstones) the node's lease and waits for
// the broker's acknowledgement.
func (f *feed) writeLease(ctx context.Context, gone bool) error {
	r := &kgo.Record{Topic: f.cfg.RegistryTopic, Key: forward.LeaseKey(f.e.node)}
	if !gone {
		v, err := json.Marshal(forward.Lease{Node: f.e.node, Incarnation: f.inc, TTLMillis: 3 * f.cfg.LeaseInterval.Milliseconds()})
		if err != nil {
			return err
		}
		r.Value = v
	}
	if err := f.e.admCl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return fmt.Errorf("engine: registry topic %s: lease: %w", f.cfg.RegistryTopic, err)
	}
	return nil
}

// ErrRegistryLeaseLost ends the forwarded subscriptions of a node that could not
// renew its registry lease for two intervals: the workers drop a node's
// subscriptions when its lease (three intervals) runs out, so they would go
// quiet; ended, their clients resume by cursor instead.
var ErrRegistryLeaseLost = errors.New("engine: registry lease lost: the filter workers may have dropped this node's subscriptions")

func (f *feed) leases(ctx context.Context) {
	defer f.wg.Done()
	tick := time.NewTicker(f.cfg.LeaseInterval)
	defer tick.Stop()
	renewed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		wctx, cancel := context.WithTimeout(ctx, f.cfg.LeaseInterval)
		err := f.writeLease(wctx, false)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			renewed = time.Now()
		case time.Since(renewed) >= 2*f.cfg.LeaseInterval:
			f.e.cfg.Logger.Error().Err(err).Msg("engine: registry lease not renewed for two intervals: ending the node's forwarded subscriptions")
			f.endAll(ErrRegistryLeaseLost)
		default:
			f.e.cfg.Logger.Warn().Err(err).Msg("engine: registry lease")
		}
	}
}

// endAll ends every registered subscription with err.
func (f *feed) endAll(err error) {
	f.mu.Lock()
	tails := slices.Collect(maps.Values(f.tails))
	f.mu.Unlock()
	for _, t := range tails {
		t.mu.Lock()
		subs := slices.Collect(maps.Values(t.reg))
		t.mu.Unlock()
		for _, s := range subs {
			s.end(err)
		}
	}
}

// end ends s with err, as Close does but without releasing the tail (its
// owner's Close still does that).
func (s *Subscription) end(err error) {
	s.err.CompareAndSwap(nil, &err) // before the catch-up, which ends without an error when cancelled
	s.stop(err)
}

// register queues s's registry entry for the registry writer, which
// retries it until it lands (asynchronously: the markers that answer it
// are what the subscription waits for).
func (f *feed) register(s *Subscription) {
	v, err := json.Marshal(forward.NewSub(f.e.node, f.inc, uint64(s.id), s.t.tenant, s.filter))
	if err != nil {
		f.e.cfg.Logger.Error().Err(err).Msg("engine: registry entry")
		return
	}
	f.reg.queue(string(forward.SubKey(f.inc, uint64(s.id))), v)
}

// unregister queues the tombstone of s's registry entry.
func (f *feed) unregister(s *Subscription) {
	f.reg.queue(string(forward.SubKey(f.inc, uint64(s.id))), nil)
}

// add makes t reachable by the run goroutine.
func (f *feed) add(t *tail) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tails[t.topic] = t
}

func (f *feed) tail(topic string) *tail {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tails[topic]
}

func (f *feed) run(ctx context.Context) {
	defer f.wg.Done()
	var touched []*tail // tails queued to in this round, woken at its end (as tail.dispatch does)
	wake := func() {
		for i, t := range touched {
			t.mu.Lock()
			t.wakeLocked()
			t.mu.Unlock()
			touched[i] = nil
		}
		touched = touched[:0]
	}
	f.e.pollLoop(ctx, f.cl, "engine: delivery fetch", func(fs kgo.Fetches) {
		f.e.cfg.Logger.Debug().Int("records", fs.NumRecords()).Msg("engine: delivery poll")
		n := 0
		for it := fs.RecordIter(); !it.Done(); {
			if n++; n%wakeEvery == 0 {
				wake()
			}
			if t := f.handle(it.Next()); t != nil && !slices.Contains(touched, t) {
				touched = append(touched, t)
			}
		}
		wake()
	})
}

// handle hands one delivery record to its tail, which it returns (nil
// when the record was not this node's or not readable).
func (f *feed) handle(r *kgo.Record) *tail {
	fw := &f.fw
	if err := forward.Decode(r, fw); err != nil {
		f.e.cfg.Logger.Warn().Err(err).Int64("offset", r.Offset).Msg("engine: delivery record")
		return nil
	}
	if fw.Node != f.e.node || fw.Incarnation != f.inc {
		return nil // another node's, or an earlier incarnation's
	}
	t := f.tail(fw.Topic)
	if t != nil {
		t.forwarded(fw, r)
	}
	return t
}

// stop ends both goroutines, tombstones the lease (so the workers drop the
// node's subscriptions at once) and closes the client.
func (f *feed) stop() {
	f.cancel()
	f.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.writeLease(ctx, true); err != nil {
		f.e.cfg.Logger.Warn().Err(err).Msg("engine: registry lease tombstone")
	}
	f.cl.Close()
}

// forwarded delivers a forwarded record (or records a marker) for the
// subscriptions it lists. A record at or before the last one forwarded from
// its source partition is a duplicate (a worker replaced after a crash
// forwards again from its committed offset) and is dropped.
func (t *tail) forwarded(fw *forward.Forwarded, r *kgo.Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := fw.Partition
	if int(p) >= len(t.pos) || t.stopped {
		return
	}
	if fw.Marker {
		for i := range fw.NumSubs() {
			if s := t.reg[filtering.ID(fw.Sub(i))]; s != nil {
				s.markLocked(p, fw.Offset)
			}
		}
		return
	}
	if fw.Offset < t.pos[p] {
		t.duplicates++
		return
	}
	t.pos[p] = fw.Offset + 1
	rec := &kgo.Record{Topic: fw.Topic, Partition: p, Offset: fw.Offset, Key: fw.Key, Value: r.Value,
		Headers: fw.Headers, Timestamp: r.Timestamp}
	ev := &Event{Record: rec}
	if err := partitioning.DecodeHeaders(rec.Headers, &ev.Attrs); err != nil {
		t.undecodable++
		return
	}
	for i := range fw.NumSubs() {
		if s := t.subs[filtering.ID(fw.Sub(i))]; s != nil {
			s.offerLocked(ev, true) // woken at the end of the feed's round
		}
	}
}

// markLocked records a worker's marker for partition p: from offset on,
// the workers forward s's matches. Must hold s.t.mu.
func (s *Subscription) markLocked(p int32, offset int64) {
	if s.marks[p] < 0 {
		s.marksMissing--
		if s.marksMissing == 0 {
			close(s.marksReady)
			if s.wake != nil {
				s.wake() // the catch-up may join now: do not wait for its next record
			}
		}
	}
	s.marks[p] = offset
}

// poll is the catch-up's PollFetches; while the workers' markers are
// missing it also returns (with no records) when they complete.
func (s *Subscription) poll(ctx context.Context, cl *kgo.Client) kgo.Fetches {
	if s.marksReady == nil {
		return cl.PollFetches(ctx)
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.t.mu.Lock()
	if s.marksMissing == 0 {
		s.t.mu.Unlock()
		return cl.PollFetches(ctx)
	}
	s.wake = cancel
	s.t.mu.Unlock()
	fs := cl.PollFetches(pctx)
	s.t.mu.Lock()
	s.wake = nil
	s.t.mu.Unlock()
	return fs
}

// waitMarks waits until every partition has a marker, for at most
// MarkerWait; it reports whether they came.
func (s *Subscription) waitMarks(ctx context.Context) bool {
	tm := time.NewTimer(s.e.cfg.Forward.MarkerWait)
	defer tm.Stop()
	select {
	case <-s.marksReady:
		return true
	case <-tm.C:
	case <-ctx.Done():
	}
	return false
}

// subscribeForwarded starts s on a forwarded feed's tail: it registers s
// with the workers, then catches up from from (live: from the topic's end
// now, without a caught-up marker) until it stands at or past the workers'
// markers and the feed's position, and joins the feed there.
func (e *Engine) subscribeForwarded(ctx context.Context, s *Subscription, from []cursor.PartitionOffset) (*Subscription, error) {
	t := s.t
	if from == nil {
		ends, err := e.adm.ListEndOffsets(ctx, t.topic)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			e.metrics.subscriptions.Dec()
			e.release(t)
			return nil, fmt.Errorf("engine: end offsets of %s: %w", t.topic, err)
		}
		ends.Each(func(lo kadm.ListedOffset) {
			from = append(from, cursor.PartitionOffset{Partition: lo.Partition, Offset: lo.Offset})
		})
		slices.SortFunc(from, func(a, b cursor.PartitionOffset) int { return int(a.Partition - b.Partition) })
		s.start, s.silent = from, true
	}
	t.register(s)
	t.feed.register(s)
	if !s.startCatchUp(append([]cursor.PartitionOffset(nil), from...), false) {
		s.Close()
		return nil, ErrClosed
	}
	return s, nil
}

// register makes s known to the feed, which records the workers' markers
// for it.
func (t *tail) register(s *Subscription) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s.marks = make([]int64, len(t.pos))
	for p := range s.marks {
		s.marks[p] = -1
	}
	s.marksMissing = len(s.marks)
	s.marksReady = make(chan struct{})
	if s.marksMissing == 0 {
		close(s.marksReady)
	}
	t.reg[s.id] = s
}

// handover is a forwarded-feed catch-up's caught-up marker sent before its
// join. A catch-up joins the feed only once the workers have answered the
// subscription's registration with their markers, which can take a while
// (a worker finds a new tenant topic within its metadata age, then the
// group rebalances) or never come (no worker runs). Meanwhile the catch-up
// reads the topic itself; a replay it was asked for still ends at the
// topic's end as of the catch-up's start: the caught-up marker goes out
// there (an R stream's held replay window goes out with it), the catch-up
// reads on, and its later join queues no second marker.
type handover struct {
	ends map[int32]int64 // the topic's end, listed once the markers were found missing
	done bool            // the marker went out
}

// early sends the caught-up marker when s still awaits the workers'
// markers and the catch-up (next) has read to the topic's end. The end is
// listed once, with a few tries; when they all fail the catch-up reads on
// and tries again at its next round (a failure is logged).
func (h *handover) early(ctx context.Context, s *Subscription, next map[int32]int64, replayed uint64, fallback bool) {
	if h.done || !s.t.awaitingMarks(s) {
		return
	}
	if h.ends == nil && !h.listEnds(ctx, s) {
		return
	}
	frontier := make([]cursor.PartitionOffset, 0, len(h.ends))
	for p, end := range h.ends {
		n, ok := next[p]
		if !ok {
			n = end // a partition the catch-up does not read
		}
		if n < end {
			return // more to replay
		}
		frontier = append(frontier, cursor.PartitionOffset{Partition: p, Offset: n})
	}
	slices.SortFunc(frontier, func(a, b cursor.PartitionOffset) int { return int(a.Partition - b.Partition) })
	// The catch-up is the only sender until it joins: room it waited for
	// stays.
	h.done = s.q.Offer(Delivery{Sequence: s.seq, Handover: &Handover{Fallback: fallback, Replayed: replayed, Frontier: frontier}})
}

// listEnds lists the end offsets of s's topic into h.ends, trying up to
// four times, 250ms apart; it reports whether it did.
func (h *handover) listEnds(ctx context.Context, s *Subscription) bool {
	var err error
	for attempt := range 4 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(250 * time.Millisecond):
			}
		}
		var ends kadm.ListedOffsets
		if ends, err = s.e.adm.ListEndOffsets(ctx, s.t.topic); err == nil {
			err = ends.Error()
		}
		if err == nil {
			h.ends = map[int32]int64{}
			ends.Each(func(lo kadm.ListedOffset) { h.ends[lo.Partition] = lo.Offset })
			return true
		}
	}
	if ctx.Err() == nil {
		s.e.cfg.Logger.Warn().Err(err).Str("topic", s.t.topic).Msg("engine: end offsets for a catch-up's handover")
	}
	return false
}

// awaitingMarks reports whether s waits for workers' markers.
func (t *tail) awaitingMarks(s *Subscription) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.feed != nil && s.marksMissing > 0
}
