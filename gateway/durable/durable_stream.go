package durable

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/internal/fetchsize"
	"github.com/aep-gateway/aep-gateway/internal/queue"
	"github.com/aep-gateway/aep-gateway/internal/tracing"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// ErrExpired ends a durable stream whose subscription reached expires_at.
var ErrExpired = errors.New("durable: subscription expired")

// ErrDeleted ends a durable stream whose subscription was deleted (on any
// node).
var ErrDeleted = errors.New("durable: subscription deleted")

// AckPolicy is the redelivery policy of an at_least_once subscription
// (D reliability.md "Retry Policy"; zero fields take its defaults).
type AckPolicy struct {
	AckTimeout        time.Duration // default 30s
	MaxAttempts       int           // default 3
	Backoff           time.Duration // default 1s
	BackoffMultiplier float64       // default 2
	MaxBackoff        time.Duration // default 30s
}

// WithDefaults fills zero fields.
func (p AckPolicy) WithDefaults() AckPolicy {
	if p.AckTimeout <= 0 {
		p.AckTimeout = 30 * time.Second
	}
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 3
	}
	if p.Backoff <= 0 {
		p.Backoff = time.Second
	}
	if p.BackoffMultiplier < 1 {
		p.BackoffMultiplier = 2
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = 30 * time.Second
	}
	return p
}

// Delay is the wait after attempt n (1-indexed) timed out before attempt
// n+1: min(backoff × multiplier^(n-1), max backoff).
func (p AckPolicy) Delay(n int) time.Duration {
	d := float64(p.Backoff)
	for i := 1; i < n && d < float64(p.MaxBackoff); i++ {
		d *= p.BackoffMultiplier
	}
	if d > float64(p.MaxBackoff) {
		return p.MaxBackoff
	}
	return time.Duration(d)
}

// DurableRequest opens the stream of a durable at_least_once subscription.
type DurableRequest struct {
	Tenant         tenant.Tenant
	SubscriptionID string
	// Group is the consumer group holding the committed offsets.
	Group  string
	Filter *filtering.Filter
	Policy AckPolicy
	// Window bounds the pending (delivered, unacknowledged) offsets per
	// partition; zero means 1024. A full window stops reading that
	// partition until acks free room.
	Window int
	// Queue is the stream's channel length; zero means the Engine's.
	Queue int
	// CommitInterval is how often committable offsets are committed;
	// zero means 1s. The stream also commits when it ends.
	CommitInterval time.Duration
	// ExpiresAt, when set, ends the stream with ErrExpired.
	ExpiresAt time.Time
	// Sequence is the delivery sequence already used; the first delivery
	// carries Sequence+1.
	Sequence uint64
	// DeadLetter encodes dead letters (required): the binding's dialect
	// decides their shape.
	DeadLetter DeadLetterCodec
	// OnWait, when not nil, hears (on the opening goroutine, at once and
	// every WaitNotice) that the opening waits for the previous holder to
	// stop: a binding tells its client, whose watchdog would fire.
	OnWait func(DurableWait)
	// MaxAckPending caps the subscription's delivered but unacknowledged
	// events on this stream; zero means DefaultMaxAckPending.
	MaxAckPending int

	clock func() time.Time // tests move time; nil means time.Now
}

// DurableKind says what a DurableDelivery is.
type DurableKind uint8

const (
	// DurableEvent is an event: first delivery (Attempt 1) or redelivery.
	DurableEvent DurableKind = iota
	// DurableDeadLettered reports an event written to the dead-letter
	// topic; Notice is the event.dead_lettered envelope.
	DurableDeadLettered
)

// DurableDelivery is one element of a durable stream.
type DurableDelivery struct {
	Kind  DurableKind
	Event *Event
	// Attempt is 1 on a first delivery; on a redelivery (> 1) it is one
	// more than the event's hand-overs before (counted by earlier streams,
	// and written by this one: see Handed), and at least 2: an event that
	// may have been delivered (a reservation, a write whose fate is
	// unknown) is marked as a repeat even when no hand-over of it counted.
	// On a dead letter, the counted hand-overs.
	Attempt  int
	Sequence uint64 // DurableEvent only
	// Notice is the dead-letter record's value, as the request's
	// DeadLetter codec encoded it (DurableDeadLettered only).
	Notice []byte
	// DeadLetter is what was dead-lettered (DurableDeadLettered only).
	DeadLetter *DeadLetter

	send int // the event's sends so far, this one included (unsend)
}

// AckResult of one acknowledgement or rejection by event id.
type AckOutcome string

// Outcomes of Ack and Reject.
const (
	OutcomeApplied  AckOutcome = "applied"  // settled pending deliveries
	OutcomeRejected AckOutcome = "rejected" // queued for dead-lettering
	OutcomeRetry    AckOutcome = "retry"    // a retryable rejection: redelivered after the backoff, or dead-lettered when out of attempts
	OutcomeUnknown  AckOutcome = "unknown"  // nothing pending under that id: duplicate, late, or never delivered
	OutcomeClosed   AckOutcome = "closed"   // the stream has ended: send it again to the next stream
)

// DurableStats is a snapshot of a durable stream.
type DurableStats struct {
	Pending      int
	Redeliveries uint64
	DeadLettered uint64
	Acked        uint64
	Handed       uint64 // deliveries the transport confirmed written (Handed)
	CapReached   uint64 // times reading stopped at MaxAckPending
}

// DefaultMaxAckPending is a stream's cap on delivered but unacknowledged
// events when the request sets none.
const DefaultMaxAckPending = 1000

// Handed confirms that the transport wrote ds (deliveries of this stream)
// to the client's connection and flushed them without error. Only such
// hand-overs can count toward max_attempts, and one counts only once the
// client shows it read that far (it acknowledged or rejected an event
// handed on this stream at or after it) or once the ack timeout after it
// passed with the stream still open; what a dropped connection held unread
// never counts. The ack timeout of a delivery counts from its latest
// hand-over. Confirmations after the stream ended, of settled events, or
// of dead letters are ignored. Safe for concurrent use. Counted hand-overs
// reach the journal with the next checkpoint (a crash loses the last ones:
// the count errs low).
func (s *DurableStream) Handed(ds ...DurableDelivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	now := s.req.clock()
	for _, d := range ds {
		if d.Kind != DurableEvent || d.Event == nil {
			continue
		}
		pe := s.pendingLocked(d.Event)
		if pe == nil {
			continue
		}
		s.stats.Handed++
		if pe.firstHand == 0 {
			pe.firstHand = d.Sequence
		}
		if d.Sequence <= s.evidence {
			pe.handed++ // the client already acked something handed after it
		} else {
			pe.tent = append(pe.tent, d.Sequence)
		}
		if d.Sequence == pe.seq {
			s.armLocked(pe, now) // the ack timeout counts from the latest hand-over
		}
	}
}

// readLocked notes that the client read pe (it acknowledged or rejected
// it): every hand-over on this stream up to pe's first one was read too.
func (s *DurableStream) readLocked(pe *pending) {
	if pe.firstHand > s.evidence {
		s.evidence = pe.firstHand
	}
}

// countLocked counts pe's tentative hand-overs up to sequence upTo.
func countLocked(pe *pending, upTo uint64) {
	kept := pe.tent[:0]
	for _, q := range pe.tent {
		if q <= upTo {
			pe.handed++
		} else {
			kept = append(kept, q)
		}
	}
	pe.tent = kept
}

// handOvers is pe's counted and tentative hand-overs: what it will have
// counted if its ack timeout passes with the stream open.
func handOvers(pe *pending) int { return pe.handed + len(pe.tent) }

// pendingLocked is the unsettled pending entry of ev, or nil.
func (s *DurableStream) pendingLocked(ev *Event) *pending {
	p := ev.Record.Partition
	if p < 0 || p >= s.parts {
		return nil
	}
	list := s.ps[p].pending
	o := ev.Record.Offset
	k := sort.Search(len(list), func(i int) bool { return list[i].ev.Record.Offset >= o })
	if k < len(list) && list[k].ev == ev && !list[k].settled && list[k].rejected == nil {
		return list[k]
	}
	return nil
}

// attemptOf is the Attempt of pe's latest send.
func attemptOf(pe *pending) int {
	if pe.attempts <= 1 {
		return 1
	}
	return max(handOvers(pe)+1, 2)
}

type pending struct {
	ev *Event
	// attempts counts the sends that may have reached a client (this
	// stream's and, from the journal, earlier holders'): it marks repeats
	// and paces the backoff. handed counts the counted hand-overs (see
	// Handed): only they count toward max_attempts, and only they are
	// checkpointed. tent holds the sequences of this stream's confirmed
	// hand-overs not counted yet (a few: every timer round counts them).
	attempts  int
	handed    int
	tent      []uint64
	firstHand uint64 // sequence of the first confirmed hand-over on this stream (0: none)
	seq       uint64 // the sequence of the latest send
	due       time.Time
	hidx      int // index in the heap, -1 when not in it
	settled   bool
	rejected  *Rejection // set by Reject or when attempts run out: dead-letter it
	lastErr   *Rejection // the consumer's latest retryable rejection (worded in the dead letter)
}

type partState struct {
	next     int64 // next offset to process
	blocked  bool  // window full: fetching paused, records ignored
	readEnd  int64 // resume state: offsets below were read by an earlier stream
	hw       int64 // resume state: offsets in [readEnd, hw) not in prior were delivered once
	prior    map[int64]int
	priorRej map[int64]*Rejection
	priorHd  map[int64]int // hand-overs of prior offsets (journalPart.D)
	reserved int64         // the high-water this stream recorded in the journal
	pending  []*pending    // in offset order; settled entries removed lazily
}

// DurableStream is the stream of one durable at_least_once subscription on
// this node: it reads the topic from the committed offsets on its own
// client (never dropping), tracks every delivered offset in a
// cursor.AckTracker, redelivers what is not acknowledged in time,
// dead-letters what runs out of attempts or is rejected, and commits the
// committable offsets with the attempts of pending ones.
type DurableStream struct {
	e     *Cluster
	req   DurableRequest
	topic string
	tag   cursor.TopicTag
	parts int32
	q     *queue.Queue[DurableDelivery]
	cl    *kgo.Client
	sizer *fetchsize.Sizer // keeps cl's fetches near ReaderFetchBytes decoded

	cancel context.CancelFunc
	done   chan struct{}
	err    atomic.Pointer[error]

	mu         sync.Mutex
	tr         *cursor.AckTracker
	ps         []partState
	byID       map[string][]*pending
	due        dueHeap
	seq        uint64
	pollCancel context.CancelFunc
	stats      DurableStats
	inflight   int    // unsettled pending deliveries, bounded by maxAckPending
	evidence   uint64 // the client read every hand-over up to this sequence (readLocked)
	lastCommit []string
	ended      bool // the reader has stopped: acks are refused
	// ids acknowledged or rejected before the stream reached their offset
	// (below an earlier holder's high-water); bounded by maxBufferedAcks
	ackedAhead map[string]bool
	rejAhead   map[string]*Rejection

	j      *journal
	w      *watcher
	epoch  int64
	fenced atomic.Bool // a newer claim was seen, or the subscription deleted: deliver nothing more
	endWhy atomic.Pointer[error]

	closeOnce sync.Once

	commitRounds atomic.Int64 // times the loop considered a checkpoint (tests)
}

// OpenDurable starts the stream of a durable subscription from its
// committed offsets (the group must have committed a start: see
// CommitStart). ctx bounds the setup only.
func (e *Cluster) OpenDurable(ctx context.Context, req DurableRequest) (*DurableStream, error) {
	if req.Filter == nil || req.Group == "" || req.DeadLetter == nil || req.Tenant.IsZero() {
		return nil, fmt.Errorf("%w: durable stream needs a tenant, a filter, a group and a dead-letter codec", ErrBadRequest)
	}
	req.Policy = req.Policy.WithDefaults()
	if req.Window <= 0 {
		req.Window = 1024
	}
	if req.CommitInterval <= 0 {
		req.CommitInterval = time.Second
	}
	if req.MaxAckPending <= 0 {
		req.MaxAckPending = DefaultMaxAckPending
	}
	if req.clock == nil {
		req.clock = time.Now
	}
	q := req.Queue
	if q <= 0 {
		q = e.cfg.queue
	}
	if q > e.cfg.maxQueue {
		return nil, fmt.Errorf("%w: queue %d exceeds %d", ErrBadRequest, q, e.cfg.maxQueue)
	}
	st, err := e.State(ctx, req.Tenant)
	if err != nil {
		return nil, err
	}
	topic := e.cfg.Naming.Events(req.Tenant.String())
	j, w, tk, err := e.claim(ctx, req, topic, st.ID.Tag(), st.Partitions)
	if err != nil {
		return nil, err
	}
	s, err := e.openClaimed(ctx, req, st, topic, j, w, tk)
	if err != nil {
		e.abandon(j, w, req.SubscriptionID)
		return nil, err
	}
	return s, nil
}

// abandon gives up a claim that did not become a stream.
func (e *Cluster) abandon(j *journal, w *watcher, sub string) {
	j.unregister(w)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = j.produce(ctx, sub, j.partition(sub), journalRecord{T: jRelease, Node: e.node, Epoch: w.epoch})
}

func (e *Cluster) openClaimed(ctx context.Context, req DurableRequest, st cursor.TopicState, topic string, j *journal, w *watcher, tk *takeover) (*DurableStream, error) {
	q := req.Queue
	if q <= 0 {
		q = e.cfg.queue
	}
	cur, _, found, err := fetchDurable(ctx, e.adm, req.Group, topic)
	if err != nil {
		return nil, err
	}
	start := make([]int64, st.Partitions)
	copy(start, st.End) // partitions never committed start at the end
	if found {
		checked, gaps := st.Check(cur)
		for _, po := range checked {
			if po.Partition >= 0 && po.Partition < st.Partitions {
				start[po.Partition] = po.Offset
			}
		}
		for _, g := range gaps {
			e.cfg.Logger.Warn().Str("group", req.Group).Int32("partition", g.Partition).Int64("requested", g.Requested).
				Int64("restart_at", g.RestartAt).Str("reason", g.Reason.String()).Msg("durable: durable subscription resumes with a gap")
		}
	}
	s := &DurableStream{
		e: e, req: req, topic: topic, tag: st.ID.Tag(), parts: st.Partitions,
		q: queue.New[DurableDelivery](q), done: make(chan struct{}),
		tr: cursor.NewAckTracker(req.Window), ps: make([]partState, st.Partitions),
		byID: map[string][]*pending{}, seq: req.Sequence,
		ackedAhead: tk.acked, rejAhead: tk.rejected, j: j, w: w, epoch: w.epoch,
	}
	offs := make(map[int32]kgo.Offset, len(start))
	for p, o := range start {
		if err := s.tr.Assign(int32(p), o); err != nil {
			return nil, err
		}
		ps := &s.ps[p]
		ps.next, ps.readEnd, ps.hw, ps.reserved = o, o, o, o
		if jp := tk.parts[int32(p)]; jp != nil && jp.C == o && jp.H > o {
			ps.readEnd, ps.hw, ps.prior, ps.priorRej, ps.priorHd = max(jp.R, o), max(jp.H, jp.R, o), jp.A, jp.X, jp.D
			ps.reserved = ps.hw
		}
		offs[int32(p)] = kgo.NewOffset().At(o)
	}
	s.sizer = fetchsize.New(e.cfg.readerFetch)
	if s.cl, err = kgo.NewClient(append(e.readerOpts(topic, offs), s.sizer.Opts()...)...); err != nil {
		return nil, fmt.Errorf("durable: durable client: %w", err)
	}
	if !e.startGoroutines(1) {
		s.cl.Close()
		return nil, ErrClosed
	}
	var rctx context.Context
	rctx, s.cancel = context.WithCancel(e.ctx)
	e.metrics.durable.Inc()
	e.lag.track(s)
	j.attach(w, s)
	go s.run(rctx)
	return s, nil
}

// CommitStart commits start (one entry per partition) as group's position
// for tenant's topic, unless the group has committed already: the position
// a new durable subscription begins at.
func (e *Cluster) CommitStart(ctx context.Context, t tenant.Tenant, group string, st cursor.TopicState, start []cursor.PartitionOffset) error {
	topic := e.cfg.Naming.Events(t.String())
	_, _, found, err := fetchDurable(ctx, e.adm, group, topic)
	if err != nil || found {
		return err
	}
	// the journal from here on holds everything of the subscription
	jr, err := e.journalFor(ctx, t)
	if err != nil {
		return err
	}
	ends, err := e.endOffsets(ctx, jr.topic)
	if err != nil {
		return err
	}
	from := int64(-1)
	ends.Each(func(lo kadm.ListedOffset) {
		if from < 0 || lo.Offset < from {
			from = lo.Offset
		}
	})
	pcs := make([]partCommit, 0, len(start))
	for _, po := range start {
		pcs = append(pcs, partCommit{Partition: po.Partition, Offset: po.Offset, ReadEnd: po.Offset, Journal: from})
	}
	return commitDurable(ctx, e.adm, group, topic, st.ID.Tag(), st.Partitions, pcs)
}

// Deliveries is the stream, read by one consumer. It ends (Next reports
// ended) when the stream ends; Err says why. Its buffer grows as
// deliveries wait in it, up to the stream's queue length.
func (s *DurableStream) Deliveries() *queue.Queue[DurableDelivery] { return s.q }

// Err is nil after Close, ErrClosed when the engine closed, ErrExpired, or
// a Kafka error.
func (s *DurableStream) Err() error {
	if p := s.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Close stops the stream, commits what is committable with the attempts of
// pending events, and waits. Idempotent.
func (s *DurableStream) Close() {
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.done
	})
}

// Epoch is the stream's claim: its offset in the subscription journal + 1.
// A newer stream of the subscription has a higher epoch.
func (s *DurableStream) Epoch() int64 { return s.epoch }

// Done is closed when the stream's reader has ended.
func (s *DurableStream) Done() <-chan struct{} { return s.done }

// Stats is a snapshot of the stream's counters.
func (s *DurableStream) Stats() DurableStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	for p := range s.ps {
		st.Pending += s.tr.Pending(int32(p))
	}
	return st
}

// Ack settles every pending delivery of the event with this id (a
// duplicate or late ack is OutcomeUnknown and harmless).
func (s *DurableStream) Ack(eventID string) AckOutcome {
	return s.settleByID(eventID, nil)
}

// Reject answers the consumer's rejection of the event with this id: one
// that is not retryable dead-letters it with the consumer's error (final);
// a retryable one redelivers it after the policy's backoff, counting an
// attempt, and dead-letters it with that error once the attempts run out.
func (s *DurableStream) Reject(eventID string, rej Rejection) AckOutcome {
	return s.settleByID(eventID, &rej)
}

// settleByID acknowledges (rej nil) or rejects the pending deliveries of
// eventID. An id not pending is remembered while an earlier holder's
// read-ahead is not reached yet: its event may still come from there.
func (s *DurableStream) settleByID(eventID string, rej *Rejection) AckOutcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return OutcomeClosed
	}
	list := s.byID[eventID]
	if len(list) == 0 {
		if rej == nil || !rej.Retryable {
			// a retryable rejection of an event not reached yet asks for
			// nothing its delivery will not give
			s.rememberLocked(eventID, rej)
		}
		return OutcomeUnknown
	}
	now := s.req.clock()
	if rej != nil && rej.Retryable {
		s.retryLocked(list, rej, now)
		return OutcomeRetry
	}
	delete(s.byID, eventID)
	for _, pe := range list {
		s.readLocked(pe)
		if rej == nil {
			tracing.Ack(pe.ev.Record, s.req.Group, string(OutcomeApplied))
			s.settleLocked(pe)
			s.stats.Acked++
			continue
		}
		tracing.Ack(pe.ev.Record, s.req.Group, string(OutcomeRejected))
		countLocked(pe, ^uint64(0)) // it was read
		if pe.handed == 0 {
			// rejected before the transport confirmed its write: the
			// rejection proves one hand-over (Handed ignores a rejected
			// entry, so the late confirmation adds none)
			pe.handed = 1
		}
		pe.rejected = rej
		pe.due = now
		if pe.hidx >= 0 {
			heap.Fix(&s.due, pe.hidx)
		} else {
			heap.Push(&s.due, pe)
		}
	}
	s.wakeLocked()
	if rej != nil {
		return OutcomeRejected
	}
	return OutcomeApplied
}

// retryLocked answers a retryable rejection of the pending deliveries in
// list: each was read (a hand-over), and its timer now waits only the
// backoff before the next attempt, or fires at once to dead-letter it when
// the attempts ran out (fire words it with rej).
func (s *DurableStream) retryLocked(list []*pending, rej *Rejection, now time.Time) {
	for _, pe := range list {
		if pe.settled || pe.rejected != nil {
			continue
		}
		s.readLocked(pe)
		tracing.Ack(pe.ev.Record, s.req.Group, string(OutcomeRetry))
		countLocked(pe, ^uint64(0)) // it was read
		pe.lastErr = rej
		pe.due = now
		if n := handOvers(pe); n < s.req.Policy.MaxAttempts {
			pe.due = now.Add(s.req.Policy.Delay(max(n, 1)))
		}
		if pe.hidx >= 0 {
			heap.Fix(&s.due, pe.hidx)
		} else {
			heap.Push(&s.due, pe)
		}
	}
	s.wakeLocked()
}

func (s *DurableStream) rememberLocked(eventID string, rej *Rejection) {
	ahead := false
	for p := range s.ps {
		ahead = ahead || s.ps[p].next < s.ps[p].hw
	}
	if !ahead || len(s.ackedAhead)+len(s.rejAhead) >= maxBufferedAcks {
		return
	}
	if rej == nil {
		s.ackedAhead[eventID] = true
	} else {
		s.rejAhead[eventID] = rej
	}
}

// applyJournal applies acks and rejections posted on any node.
func (s *DurableStream) applyJournal(rec journalRecord) {
	if rec.Node != s.e.node && !rec.At.IsZero() {
		defer func() { s.e.metrics.ackLag.Observe(time.Since(rec.At).Seconds()) }()
	}
	for _, id := range rec.Acks {
		s.settleByID(id, nil)
	}
	for _, r := range rec.Rejects {
		s.settleByID(r.ID, &Rejection{Code: r.Code, Message: r.Message, Retryable: r.Retry})
	}
}

// fence stops the stream: a newer claim was seen.
func (s *DurableStream) fence() { s.end(ErrTakenOver) }

// end stops the stream with why as its Err (the first reason wins).
func (s *DurableStream) end(why error) {
	s.endWhy.CompareAndSwap(nil, &why)
	s.fenced.Store(true)
	s.cancel()
}

// settleLocked marks pe done in the tracker and drops its timer.
func (s *DurableStream) settleLocked(pe *pending) {
	if pe.settled {
		return
	}
	pe.settled = true
	s.inflight--
	if pe.hidx >= 0 {
		heap.Remove(&s.due, pe.hidx)
	}
	s.tr.Ack(pe.ev.Record.Partition, pe.ev.Record.Offset)
}

// wakeLocked interrupts the reader's poll so it acts on acks at once.
func (s *DurableStream) wakeLocked() {
	if s.pollCancel != nil {
		s.pollCancel()
	}
}

func (s *DurableStream) run(ctx context.Context) {
	defer s.e.wg.Done()
	defer close(s.done)
	defer s.e.metrics.durable.Dec()
	defer s.e.lag.untrack(s)
	err := s.loop(ctx)
	if why := s.endWhy.Load(); why != nil && ctx.Err() != nil && err == ctx.Err() {
		err = *why // Hand ended it: the lease ran out
	}
	s.mu.Lock()
	s.ended = true // the final commit below sees every ack applied before
	s.mu.Unlock()
	s.unsend()
	s.j.unregister(s.w) // no more acks from the journal: the next holder applies them
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if !errors.Is(err, ErrLeaseLost) {
		s.deadLetterRejected(cctx)
		// a lost lease may already be someone else's: no commit (the
		// release below is still true: this epoch delivers nothing more)
		if cerr := s.commitAs(cctx, 0); cerr != nil {
			s.e.cfg.Logger.Warn().Err(cerr).Str("group", s.req.Group).Msg("durable: final commit")
		}
	}
	sub := s.req.SubscriptionID
	if _, rerr := s.j.produce(cctx, sub, s.j.partition(sub), journalRecord{T: jRelease, Node: s.e.node, Epoch: s.epoch}); rerr != nil {
		s.e.cfg.Logger.Warn().Err(rerr).Str("group", s.req.Group).Msg("durable: release")
	}
	cancel()
	s.cl.Close()
	if ctx.Err() != nil && err == ctx.Err() {
		err = nil
		if why := s.endWhy.Load(); why != nil {
			err = *why
		} else if s.e.ctx.Err() != nil {
			err = ErrClosed
		}
	}
	if err != nil {
		s.err.Store(&err)
	}
	s.q.End()
}

func (s *DurableStream) loop(ctx context.Context) error {
	lastCommit, lastCheck := time.Now(), time.Now()
	var out []DurableDelivery
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.leaseErr(); err != nil {
			return err // what waits in the queue is taken back (run)
		}
		now := s.req.clock()
		if !s.req.ExpiresAt.IsZero() && !now.Before(s.req.ExpiresAt) {
			return ErrExpired
		}
		out = s.fire(ctx, now, out[:0])
		if err := s.reserveAndSend(ctx, out); err != nil {
			return err
		}
		if now.Sub(lastCommit) >= s.req.CommitInterval {
			if err := s.commit(ctx); err != nil && ctx.Err() == nil {
				s.e.cfg.Logger.Warn().Err(err).Str("group", s.req.Group).Msg("durable: commit")
			}
			s.commitRounds.Add(1)
			lastCommit = now
		}
		if every := s.e.cfg.PartitionCheck; every > 0 && time.Since(lastCheck) >= every {
			s.checkPartitions(ctx)
			lastCheck = time.Now()
		}
		pctx, wait := s.pollContext(ctx, now)
		fs := s.cl.PollFetches(pctx)
		wait()
		s.sizer.Adjust(s.cl) // the next fetch decodes to about ReaderFetchBytes
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fs.IsClientClosed() {
			return ErrClosed
		}
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				s.e.cfg.Logger.Warn().Err(err).Str("topic", topic).Int32("partition", p).Msg("durable: durable fetch")
			}
		})
		out = s.read(fs, s.req.clock(), out[:0])
		if err := s.reserveAndSend(ctx, out); err != nil {
			return err
		}
	}
}

// checkPartitions asks for the topic's partition count (one metadata
// request) and, when partitions were added, reads them from their log
// start: every record there was written after the stream opened (or after
// the commit it resumed from, which covers the partitions it names: the
// others start at their log start at the next open too, cursor
// TopicState.Check). Their offsets are committed with the rest from then
// on. Stream goroutine only.
func (s *DurableStream) checkPartitions(ctx context.Context) {
	st, grown, err := cursor.GrownTopicState(ctx, s.e.adm, s.topic, s.parts)
	if err != nil && ctx.Err() == nil {
		s.e.cfg.Logger.Debug().Err(err).Str("topic", s.topic).Msg("durable: partition check")
	}
	if !grown || st.ID.Tag() != s.tag {
		return // unchanged, unreadable, or another topic under the name: the next check, or the next open, decides
	}
	s.mu.Lock()
	from := s.parts
	if st.Partitions <= from {
		s.mu.Unlock()
		return
	}
	add := make(map[int32]kgo.Offset, st.Partitions-from)
	for p := from; p < st.Partitions; p++ {
		o := st.Start[p]
		if err := s.tr.Assign(p, o); err != nil {
			s.mu.Unlock()
			s.e.cfg.Logger.Error().Err(err).Str("group", s.req.Group).Msg("durable: added partitions not read")
			return
		}
		s.ps = append(s.ps, partState{next: o, readEnd: o, hw: o, reserved: o})
		add[p] = kgo.NewOffset().At(o)
	}
	s.parts = st.Partitions
	s.mu.Unlock()
	s.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{s.topic: add})
	s.e.cfg.Logger.Warn().Str("group", s.req.Group).Int32("partitions_before", from).Int32("partitions", st.Partitions).
		Msg("durable: partitions were added to the topic; the subscription reads them from their start")
}

// pollContext bounds the next poll by the next timer (at most 250ms) and
// lets Ack and Reject interrupt it; it also resumes partitions whose window
// has room again.
func (s *DurableStream) pollContext(ctx context.Context, now time.Time) (context.Context, func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wait := 250 * time.Millisecond
	if len(s.due) > 0 {
		if d := s.due[0].due.Sub(now); d < wait {
			wait = max(d, 0)
		}
	}
	var resume map[string]map[int32]kgo.EpochOffset
	for p := range s.ps {
		if ps := &s.ps[p]; ps.blocked && s.tr.Room(int32(p)) > 0 && s.inflight < s.req.MaxAckPending {
			ps.blocked = false
			if resume == nil {
				resume = map[string]map[int32]kgo.EpochOffset{s.topic: {}}
			}
			resume[s.topic][int32(p)] = kgo.EpochOffset{Epoch: -1, Offset: ps.next}
		}
	}
	if resume != nil {
		s.cl.SetOffsets(resume)
		parts := make([]int32, 0, len(resume[s.topic]))
		for p := range resume[s.topic] {
			parts = append(parts, p)
		}
		s.cl.ResumeFetchPartitions(map[string][]int32{s.topic: parts})
	}
	pctx, cancel := context.WithTimeout(ctx, wait)
	s.pollCancel = cancel
	return pctx, func() {
		s.mu.Lock()
		s.pollCancel = nil
		s.mu.Unlock()
		cancel()
	}
}

// read processes fetched records: filtered out ones are done at once,
// matching ones are delivered (or, below an earlier stream's read end,
// redelivered with their next attempt or skipped as done). A matching
// record that would be a first delivery while MaxAckPending are pending
// stops reading its partition until acks free room.
func (s *DurableStream) read(fs kgo.Fetches, now time.Time, out []DurableDelivery) []DurableDelivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	var attrs aep.Attrs
	for it := fs.RecordIter(); !it.Done(); {
		r := it.Next()
		p := r.Partition
		if p < 0 || p >= s.parts {
			continue
		}
		ps := &s.ps[p]
		if ps.blocked || r.Offset < ps.next {
			continue // paused (read again after SetOffsets) or seen
		}
		if s.tr.Room(p) <= 0 || r.Offset-ps.next >= s.tr.Room(p) {
			s.blockLocked(p)
			continue
		}
		if partitioning.DecodeHeaders(r.Headers, &attrs) != nil || !s.req.Filter.Match(&attrs) {
			ps.next = r.Offset + 1
			_ = s.tr.Filtered(p, r.Offset) // room checked above
			continue
		}
		attempts, handed := 1, 0
		if r.Offset < ps.hw {
			// an earlier holder may have delivered it: a repeat, marked
			n, was := ps.prior[r.Offset]
			if !was && r.Offset >= ps.readEnd {
				n, was = 1, true // delivered once, after its last checkpoint
			}
			if !was || s.ackedAhead[attrs.ID] {
				ps.next = r.Offset + 1
				delete(s.ackedAhead, attrs.ID)
				_ = s.tr.Filtered(p, r.Offset) // settled by an earlier stream
				continue
			}
			attempts, handed = n+1, ps.priorHd[r.Offset]
		}
		if attempts == 1 && s.inflight >= s.req.MaxAckPending {
			// a new delivery waits; a repeat of one an earlier stream may
			// have delivered is pending already and still goes
			s.stats.CapReached++
			s.blockLocked(p)
			continue
		}
		ps.next = r.Offset + 1
		rej := ps.priorRej[r.Offset]
		if rej == nil && r.Offset < ps.hw {
			rej = s.rejAhead[attrs.ID]
		}
		delete(ps.prior, r.Offset)
		delete(ps.priorRej, r.Offset)
		delete(ps.priorHd, r.Offset)
		delete(s.rejAhead, attrs.ID)
		ev := &Event{Record: r, Attrs: attrs}
		attrs.Ext = nil
		_ = s.tr.Delivered(p, r.Offset)
		pe := &pending{ev: ev, attempts: attempts, handed: handed, hidx: -1}
		trimSettled(ps)
		ps.pending = append(ps.pending, pe)
		s.inflight++
		s.byID[ev.Attrs.ID] = append(s.byID[ev.Attrs.ID], pe)
		switch {
		case rej != nil:
			// rejected on an earlier stream: final
			pe.attempts, pe.rejected, pe.due = attempts-1, rej, now
			heap.Push(&s.due, pe)
			continue
		case handed >= s.req.Policy.MaxAttempts:
			// its last attempt was handed on an earlier stream: the
			// consumer may still ack it within the ack timeout, else it
			// is dead-lettered (not handed again)
			pe.attempts, pe.due = attempts-1, now.Add(s.req.Policy.AckTimeout)
			heap.Push(&s.due, pe)
			continue
		}
		if attempts > 1 {
			s.stats.Redeliveries++
			s.e.redelivery(s.req.Tenant)
		}
		out = s.sendLocked(pe, now, out)
	}
	return out
}

// blockLocked pauses fetching partition p: its window is full or the
// stream holds MaxAckPending pending deliveries (pollContext resumes it).
func (s *DurableStream) blockLocked(p int32) {
	s.ps[p].blocked = true
	s.cl.PauseFetchPartitions(map[string][]int32{s.topic: {p}})
}

// sendLocked arms pe's timer and appends its delivery (pe.attempts
// already counts it).
func (s *DurableStream) sendLocked(pe *pending, now time.Time, out []DurableDelivery) []DurableDelivery {
	s.armLocked(pe, now)
	s.seq++
	pe.seq = s.seq
	return append(out, DurableDelivery{Kind: DurableEvent, Event: pe.ev, Attempt: attemptOf(pe), Sequence: s.seq, send: pe.attempts})
}

// armLocked starts pe's timer after a send or a hand-over at now: its ack
// timeout, then the backoff before the next attempt (none once the
// hand-overs reached max_attempts: it is dead-lettered when the timeout
// passes). A send that is never handed is sent again after the same wait.
func (s *DurableStream) armLocked(pe *pending, now time.Time) {
	pol := s.req.Policy
	pe.due = now.Add(pol.AckTimeout)
	if n := handOvers(pe); n < pol.MaxAttempts {
		pe.due = pe.due.Add(pol.Delay(max(n, 1)))
	}
	if pe.hidx >= 0 {
		heap.Fix(&s.due, pe.hidx)
	} else {
		heap.Push(&s.due, pe)
	}
}

// fire handles due timers: redelivery of the event and of every later
// pending event of its session on the same partition, in offset order (the
// session's order is kept); dead-lettering of rejected events and of events
// handed max_attempts times without an ack. A later event of the session
// that was handed max_attempts times is not redelivered: its own timer
// dead-letters it.
func (s *DurableStream) fire(ctx context.Context, now time.Time, out []DurableDelivery) []DurableDelivery {
	var dead []*pending
	s.mu.Lock()
	for len(s.due) > 0 && !s.due[0].due.After(now) {
		pe := s.due[0]
		countLocked(pe, ^uint64(0)) // its ack timeout passed with the stream open
		if pe.rejected != nil || pe.handed >= s.req.Policy.MaxAttempts {
			heap.Pop(&s.due)
			if pe.rejected == nil {
				pe.rejected = &Rejection{Exhausted: true}
				if pe.lastErr != nil {
					pe.rejected.Code, pe.rejected.Message = pe.lastErr.Code, pe.lastErr.Message
				}
			}
			s.dropIDLocked(pe)
			dead = append(dead, pe)
			continue
		}
		for _, q := range s.sessionTailLocked(pe) {
			if q.rejected != nil || handOvers(q) >= s.req.Policy.MaxAttempts {
				continue
			}
			q.attempts++
			s.stats.Redeliveries++
			s.e.redelivery(s.req.Tenant)
			out = s.sendLocked(q, now, out)
		}
	}
	s.mu.Unlock()
	for _, pe := range dead {
		notice, p, err := s.deadLetter(ctx, pe, now)
		s.mu.Lock()
		if err != nil {
			if ctx.Err() == nil {
				s.e.cfg.Logger.Warn().Err(err).Str("group", s.req.Group).Msg("durable: dead-letter write; retrying")
			}
			pe.due = now.Add(time.Second)
			heap.Push(&s.due, pe)
			s.mu.Unlock()
			continue
		}
		s.settleLocked(pe)
		s.stats.DeadLettered++
		s.e.deadLetter(s.req.Tenant)
		s.mu.Unlock()
		out = append(out, DurableDelivery{Kind: DurableDeadLettered, Event: pe.ev, Attempt: pe.handed, Notice: notice, DeadLetter: p})
	}
	return out
}

// deadLetterRejected dead-letters, as the stream ends, the events its
// consumer rejected that the loop had not written to the dead-letter topic
// yet (a consumer that rejects and leaves at once), so that the final
// commit covers them: otherwise the subscription shows them as lag until
// its next holder applies the rejections from the journal. One that fails
// to write stays for that holder.
func (s *DurableStream) deadLetterRejected(ctx context.Context) {
	now := s.req.clock()
	var rejected []*pending
	s.mu.Lock()
	for _, pe := range s.due { // collected first: removing reorders the heap
		if pe.rejected != nil && !pe.settled {
			rejected = append(rejected, pe)
		}
	}
	for _, pe := range rejected {
		heap.Remove(&s.due, pe.hidx)
		s.dropIDLocked(pe)
	}
	s.mu.Unlock()
	for _, pe := range rejected {
		if _, _, err := s.deadLetter(ctx, pe, now); err != nil {
			s.e.cfg.Logger.Warn().Err(err).Str("group", s.req.Group).Msg("durable: dead-letter write at the stream's end (the next holder writes it)")
			continue
		}
		s.mu.Lock()
		s.settleLocked(pe)
		s.stats.DeadLettered++
		s.e.deadLetter(s.req.Tenant)
		s.mu.Unlock()
	}
}

// sessionTailLocked is pe followed by every later unsettled pending event
// of the same session on its partition, in offset order. Events without a
// session are redelivered alone.
func (s *DurableStream) sessionTailLocked(pe *pending) []*pending {
	ps := &s.ps[pe.ev.Record.Partition]
	trimSettled(ps)
	sess := pe.ev.Attrs.Session
	if sess == "" {
		return []*pending{pe}
	}
	k := sort.Search(len(ps.pending), func(i int) bool { return ps.pending[i].ev.Record.Offset >= pe.ev.Record.Offset })
	var tail []*pending
	for _, q := range ps.pending[k:] {
		if q == pe || (!q.settled && q.hidx >= 0 && q.ev.Attrs.Session == sess) {
			tail = append(tail, q)
		}
	}
	return tail
}

// trimSettled drops settled entries at the front of ps.pending; the rest
// lie within the tracker's window, which bounds the slice.
func trimSettled(ps *partState) {
	i := 0
	for i < len(ps.pending) && ps.pending[i].settled {
		ps.pending[i] = nil
		i++
	}
	ps.pending = ps.pending[i:]
}

func (s *DurableStream) dropIDLocked(pe *pending) {
	id := pe.ev.Attrs.ID
	list := s.byID[id]
	for i, q := range list {
		if q == pe {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(s.byID, id)
	} else {
		s.byID[id] = list
	}
}

// unsend takes back what is still in the stream's queue: the consumer
// never got it, so its attempt is not counted (attempts 0 is "pending,
// never delivered": the next holder delivers it as new). The consumer may
// take from the queue at the same time; each delivery goes to one of them,
// and the End that follows wakes the consumer.
func (s *DurableStream) unsend() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		d, ok, _ := s.q.Next()
		if !ok {
			return
		}
		s.unsendLocked([]DurableDelivery{d})
	}
}

// unsendLocked uncounts the attempts of deliveries that never reached the
// consumer.
func (s *DurableStream) unsendLocked(out []DurableDelivery) {
	for _, d := range out {
		if d.Kind != DurableEvent {
			continue
		}
		for _, pe := range s.ps[d.Event.Record.Partition].pending {
			if pe.ev == d.Event && !pe.settled {
				// sends only grow and leave in order: from this one on
				// none was delivered
				pe.attempts = min(pe.attempts, d.send-1)
			}
		}
	}
}

// reserveChunk is how many deliveries one journal reservation covers: a
// takeover marks at most that many (plus what sat in the consumer's
// buffers) as repeats that the consumer may never have seen.
const reserveChunk = 512

// reserveAndSend records in the journal, before anything of out reaches
// the consumer, the high-water of what this stream may have delivered and
// the attempts of redeliveries (a later holder marks those as repeats),
// chunk by chunk; it refuses to send when the stream was fenced or lost
// its lease.
func (s *DurableStream) reserveAndSend(ctx context.Context, out []DurableDelivery) error {
	for len(out) > 0 {
		n := min(len(out), reserveChunk)
		err := s.reserve(ctx, out[:n])
		if err == nil && s.fenced.Load() {
			err = ctx.Err()
		}
		if err != nil {
			s.mu.Lock()
			s.unsendLocked(out)
			s.mu.Unlock()
			return err
		}
		if err := s.send(ctx, out[:n]); err != nil {
			s.mu.Lock()
			s.unsendLocked(out[n:])
			s.mu.Unlock()
			return err
		}
		out = out[n:]
	}
	return nil
}

func (s *DurableStream) reserve(ctx context.Context, out []DurableDelivery) error {
	if err := s.leaseErr(); err != nil {
		return err
	}
	rec := journalRecord{T: jDeliver, Node: s.e.node, Epoch: s.epoch}
	s.mu.Lock()
	for _, d := range out {
		if d.Kind != DurableEvent {
			continue
		}
		p, o := d.Event.Record.Partition, d.Event.Record.Offset
		if o >= s.ps[p].reserved {
			if rec.HW == nil {
				rec.HW = map[int32]int64{}
			}
			rec.HW[p] = max(rec.HW[p], o+1)
			if d.send < 2 {
				continue // a first read: the high-water says "sent once"
			}
		}
		// below the reserved high-water (an earlier holder's range, or a
		// redelivery) the sends are recorded themselves: a checkpoint may
		// list the offset as never sent
		if rec.Att == nil {
			rec.Att = map[int32]map[int64]int{}
		}
		if rec.Att[p] == nil {
			rec.Att[p] = map[int64]int{}
		}
		rec.Att[p][o] = d.send
	}
	s.mu.Unlock()
	if rec.HW == nil && rec.Att == nil {
		return nil
	}
	sub := s.req.SubscriptionID
	if _, err := s.j.produce(ctx, sub, s.j.partition(sub), rec); err != nil {
		return err
	}
	s.mu.Lock()
	for p, hw := range rec.HW {
		s.ps[p].reserved = max(s.ps[p].reserved, hw)
	}
	s.mu.Unlock()
	return nil
}

// send hands out to the consumer in order, waiting for room.
func (s *DurableStream) send(ctx context.Context, out []DurableDelivery) error {
	for i, d := range out {
		if err := s.q.Push(ctx, d); err != nil {
			s.mu.Lock()
			s.unsendLocked(out[i:])
			s.mu.Unlock()
			return err
		}
		if d.Kind == DurableEvent {
			s.e.eng.CountDelivered()
		}
	}
	return nil
}

// commit checkpoints the stream's state as the holder.
func (s *DurableStream) commit(ctx context.Context) error { return s.commitAs(ctx, s.epoch) }

// commitAs checkpoints, when it changed, the committable offset of every
// partition with the read end, the reserved high-water, the sends and
// hand-overs of pending offsets in the journal, then commits it to the
// group with holder h (0: released). The record's encoding is
// deterministic (JSON sorts map keys; the id lists are sorted), so an
// unchanged state writes nothing.
func (s *DurableStream) commitAs(ctx context.Context, h int64) error {
	s.mu.Lock()
	s.pruneAheadLocked()
	jps := make([]journalPart, 0, len(s.ps))
	for p := range s.ps {
		if jp, ok := s.journalPartLocked(int32(p)); ok {
			jps = append(jps, jp)
		}
	}
	rec := journalRecord{T: jCkpt, Node: s.e.node, Epoch: s.epoch, Parts: jps}
	for id := range s.ackedAhead {
		rec.Acks = append(rec.Acks, id)
	}
	sort.Strings(rec.Acks)
	for id, r := range s.rejAhead {
		rec.Rejects = append(rec.Rejects, journalRejection{ID: id, Code: r.Code, Message: r.Message})
	}
	sort.Slice(rec.Rejects, func(i, j int) bool { return rec.Rejects[i].ID < rec.Rejects[j].ID })
	s.mu.Unlock()
	key, err := json.Marshal(struct {
		R journalRecord
		H int64
	}{rec, h})
	if err != nil {
		return err
	}
	if len(s.lastCommit) == 1 && s.lastCommit[0] == string(key) {
		return nil
	}
	sub := s.req.SubscriptionID
	off, err := s.j.produce(ctx, sub, s.j.partition(sub), rec)
	if err != nil {
		return err
	}
	if err := commitDurable(ctx, s.e.adm, s.req.Group, s.topic, s.tag, s.parts, commitsOf(jps, off, h)); err != nil {
		return err
	}
	s.lastCommit = []string{string(key)} // only the stream's goroutine commits
	return nil
}

// journalPartLocked is partition p's checkpoint state; false when nothing
// of it is committable yet.
func (s *DurableStream) journalPartLocked(p int32) (journalPart, bool) {
	ps := &s.ps[p]
	off, ok := s.tr.Committable(p)
	if !ok {
		return journalPart{}, false
	}
	jp := journalPart{P: p, C: off, R: max(ps.next, ps.readEnd, off), A: map[int64]int{}}
	jp.H = max(jp.R, ps.hw)
	note := func(o int64, sends, handed int, rej *Rejection) {
		jp.A[o] = sends
		if handed > 0 {
			if jp.D == nil {
				jp.D = map[int64]int{}
			}
			jp.D[o] = handed
		}
		if rej != nil && !rej.Exhausted {
			if jp.X == nil {
				jp.X = map[int64]*Rejection{}
			}
			jp.X[o] = rej
		}
	}
	for _, pe := range ps.pending {
		if !pe.settled && pe.ev.Record.Offset >= off {
			countLocked(pe, s.evidence)
			note(pe.ev.Record.Offset, pe.attempts, pe.handed, pe.rejected)
		}
	}
	// offsets an earlier holder reserved and not reached yet keep their state
	for o, n := range ps.prior {
		if o >= ps.next {
			note(o, n, ps.priorHd[o], ps.priorRej[o])
		}
	}
	return jp, true
}

// pruneAheadLocked forgets the ids acknowledged or rejected ahead of their
// events once the stream has read past the earlier holders' high-water on
// every partition: such an id can only match an event below it (an event
// this stream delivers itself is settled through byID), so what is left
// then is stale (a duplicate or late ack, an unknown id) and would be
// carried into every checkpoint.
func (s *DurableStream) pruneAheadLocked() {
	if len(s.ackedAhead) == 0 && len(s.rejAhead) == 0 {
		return
	}
	for p := range s.ps {
		if s.ps[p].next < s.ps[p].hw {
			return
		}
	}
	clear(s.ackedAhead)
	clear(s.rejAhead)
}

// dueHeap orders pending deliveries by due time, then by partition and
// offset: a session's events redelivered together share a due time and
// keep firing in log order.
type dueHeap []*pending

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if !a.due.Equal(b.due) {
		return a.due.Before(b.due)
	}
	if a.ev.Record.Partition != b.ev.Record.Partition {
		return a.ev.Record.Partition < b.ev.Record.Partition
	}
	return a.ev.Record.Offset < b.ev.Record.Offset
}
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i, j
}
func (h *dueHeap) Push(x any) {
	pe := x.(*pending)
	pe.hidx = len(*h)
	*h = append(*h, pe)
}
func (h *dueHeap) Pop() any {
	old := *h
	pe := old[len(old)-1]
	old[len(old)-1] = nil
	pe.hidx = -1
	*h = old[:len(old)-1]
	return pe
}
