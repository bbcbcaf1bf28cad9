package durable

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/cursor"
)

// ErrTakenOver ends a durable stream (or refuses its opening) because a
// newer stream of the same subscription claimed it, on any node: the
// newest claim wins.
var ErrTakenOver = errors.New("durable: a newer stream of the subscription took it over")

// ErrLeaseLost ends a durable stream whose lease renewals failed for
// LeaseHold: another node may take it over, so it stops delivering.
var ErrLeaseLost = errors.New("durable: the stream's lease could not be renewed")

// DurableWait tells the binding of a stream being opened that it waits for
// the previous holder of the subscription (DurableRequest.OnWait): Epoch
// is the new claim, Holder and Node the previous holder's epoch and node
// ("" when this node did not see its claim), Left how long the wait lasts
// at most from now.
type DurableWait struct {
	Epoch  int64
	Holder int64
	Node   string
	Left   time.Duration
}

// WaitNotice is how often OnWait is called again while a claimant waits.
const WaitNotice = time.Second

// takeover is what a new holder starts from: per partition the committed
// offset, the read end, the reserved high-water, the attempts of pending
// offsets and the rejected ones; and the ids acknowledged or rejected by
// id that could not be matched to offsets yet.
type takeover struct {
	parts    map[int32]*journalPart
	acked    map[string]bool
	rejected map[string]*Rejection
}

// claim makes this node the holder of the subscription's stream: it writes
// a claim (its offset is the epoch), waits until the previous holder (the
// group commit's h) released or certainly stopped delivering, folds the
// journal from the last checkpoint into the takeover state, checkpoints it
// with h = the new epoch, and checks that no newer claim appeared
// meanwhile. A claim that fails is released.
func (e *Cluster) claim(ctx context.Context, req DurableRequest, topic string, tag cursor.TopicTag, parts int32) (*journal, *watcher, *takeover, error) {
	var j *journal
	var w *watcher
	var err error
	for range 2 { // a journal retired (idle) between journalFor and register: once more
		if j, err = e.journalFor(ctx, req.Tenant); err != nil {
			return nil, nil, nil, err
		}
		if w, err = j.register(req.SubscriptionID); !errors.Is(err, ErrClosed) || e.ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return nil, nil, nil, err
	}
	tk, err := e.claimWith(ctx, j, w, req, topic, tag, parts)
	if err != nil {
		if w.epoch != 0 {
			e.abandon(j, w, req.SubscriptionID)
		} else {
			j.unregister(w)
		}
		return nil, nil, nil, err
	}
	return j, w, tk, nil
}

func (e *Cluster) claimWith(ctx context.Context, j *journal, w *watcher, req DurableRequest, topic string, tag cursor.TopicTag, parts int32) (*takeover, error) {
	sub, p := req.SubscriptionID, j.partition(req.SubscriptionID)
	start := time.Now()
	off, err := j.produce(ctx, sub, p, journalRecord{T: jClaim, Node: e.node})
	if err != nil {
		return nil, err
	}
	acked := time.Now()
	epoch := off + 1 // 0 is "no holder"
	j.mu.Lock()
	w.epoch = epoch
	j.mu.Unlock()
	w.extend(start)
	_, pcs, _, err := fetchDurable(ctx, e.adm, req.Group, topic)
	if err != nil {
		return nil, err
	}
	if h := holderOf(pcs); h > 0 && h < epoch {
		if err := j.awaitRelease(ctx, w, h, off, acked, req.OnWait); err != nil {
			return nil, err
		}
		if _, pcs, _, err = fetchDurable(ctx, e.adm, req.Group, topic); err != nil {
			return nil, err
		}
	}
	if fenced := j.newerClaim(w); fenced {
		return nil, ErrTakenOver
	}
	tk, err := e.replay(ctx, j, p, sub, pcs)
	if err != nil {
		return nil, err
	}
	// the holder mark is committed now; the checkpoint below is a journal
	// write of ours before any newer claim (checked after it), so the lease
	// counts from here
	w.extend(time.Now())
	if err := e.checkpoint(ctx, j, req, topic, tag, parts, epoch, tk, epoch); err != nil {
		return nil, err
	}
	ends, err := e.endOffsets(ctx, j.topic)
	if err != nil {
		return nil, err
	}
	if lo, ok := ends.Lookup(j.topic, p); ok {
		if err := j.prog.waitPast(ctx, p, lo.Offset); err != nil {
			return nil, err
		}
	}
	if j.newerClaim(w) {
		// a newer claimant read the commit before ours: hand the holder
		// mark to the newest claim, then step aside
		j.mu.Lock()
		newest := w.maxClaim
		j.mu.Unlock()
		if err := e.checkpoint(ctx, j, req, topic, tag, parts, epoch, tk, newest); err != nil {
			e.cfg.Logger.Warn().Err(err).Str("group", req.Group).Msg("durable: hand-over commit")
		}
		return nil, ErrTakenOver
	}
	return tk, nil
}

func holderOf(pcs map[int32]partCommit) int64 {
	var h int64
	for _, pc := range pcs {
		h = max(h, pc.Holder)
	}
	return h
}

func (j *journal) newerClaim(w *watcher) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return w.maxClaim > w.epoch
}

// awaitRelease waits until holder h released, or until LeaseTTL passed
// since h's last sign of life before our claim as this node saw it
// (signOfLife; at the latest our claim's acknowledgement, acked): h's
// renewals count only when they precede every newer claim in the journal,
// so h stopped delivering by LeaseHold after that sign, measured in
// durations on each node and never by comparing clocks. A newer claim of
// the subscription does not restart the wait: the sign it counts from is
// the same. A newer claim than ours ends the wait with ErrTakenOver.
// onWait (if not nil) hears of the wait at once and every WaitNotice.
func (j *journal) awaitRelease(ctx context.Context, w *watcher, h, claimOff int64, acked time.Time, onWait func(DurableWait)) error {
	p := j.partition(w.sub)
	// every record before our claim is read: the holder's signs of life
	// among them are known
	if err := j.prog.waitPast(ctx, p, claimOff+1); err != nil {
		return fmt.Errorf("durable: read %s up to the claim: %w", j.topic, err)
	}
	var told time.Time
	for {
		j.mu.Lock()
		newer, released, err := w.maxClaim > w.epoch, w.released[h], j.err
		since, ok := j.signOfLifeLocked(w.sub, h)
		node := j.claimantLocked(w.sub, h)
		j.mu.Unlock()
		switch {
		case newer:
			return ErrTakenOver
		case released:
			return nil
		case err != nil:
			return err
		}
		if !ok || since.After(acked) {
			since = acked
		}
		deadline := since.Add(LeaseTTL)
		now := time.Now()
		if !now.Before(deadline) {
			return nil // the holder stopped delivering by now
		}
		if onWait != nil && now.Sub(told) >= WaitNotice {
			onWait(DurableWait{Epoch: w.epoch, Holder: h, Node: node, Left: deadline.Sub(now)})
			told = now
		}
		tm := time.NewTimer(min(deadline.Sub(now), WaitNotice))
		select {
		case <-w.notify:
		case <-tm.C:
		case <-ctx.Done():
			tm.Stop()
			return ctx.Err()
		}
		tm.Stop()
	}
}

// subLife is what this node's journal follower saw of one subscription's
// epochs since it started: the latest claims, and per epoch when it last
// saw a sign of life of it (a renewal listing it, a deliver or checkpoint
// record of it) before any newer claim.
type subLife struct {
	maxClaim int64
	claims   []seenClaim         // ascending epochs, at most maxSeenClaims
	signs    map[int64]time.Time // at most maxSeenSigns epochs
	evicted  int64               // the highest epoch whose claim or sign was forgotten
	touched  time.Time           // the last record seen
}

type seenClaim struct {
	epoch int64
	at    time.Time
	node  string
}

// Bounds of what a follower remembers of the subscriptions' epochs.
const (
	maxSeenClaims = 16
	maxSeenSigns  = 8
	maxLives      = 1 << 14
)

// lifeLocked is sub's subLife, made on first sight. When maxLives are
// tracked, the one seen least recently is dropped (quietFloor keeps its
// last sighting as a bound). Must hold j.mu.
func (j *journal) lifeLocked(sub string, now time.Time) *subLife {
	l := j.lives[sub]
	if l == nil {
		if len(j.lives) >= maxLives {
			var oldest string
			for id, o := range j.lives {
				if oldest == "" || o.touched.Before(j.lives[oldest].touched) {
					oldest = id
				}
			}
			if j.lives[oldest].touched.After(j.quietFloor) {
				j.quietFloor = j.lives[oldest].touched
			}
			delete(j.lives, oldest)
		}
		l = &subLife{signs: map[int64]time.Time{}}
		j.lives[sub] = l
	}
	l.touched = now
	return l
}

func (l *subLife) claim(ep int64, at time.Time, node string) {
	l.maxClaim = max(l.maxClaim, ep)
	l.claims = append(l.claims, seenClaim{ep, at, node})
	if len(l.claims) > maxSeenClaims {
		l.evicted = max(l.evicted, l.claims[0].epoch)
		l.claims = append(l.claims[:0], l.claims[1:]...)
	}
}

// sign notes a sign of life of epoch ep, unless a newer claim was seen
// before it (such a sign does not extend ep's lease).
func (l *subLife) sign(ep int64, at time.Time) {
	if ep <= 0 || l.maxClaim > ep {
		return
	}
	l.signs[ep] = at
	if len(l.signs) > maxSeenSigns {
		low := ep
		for e := range l.signs {
			low = min(low, e)
		}
		delete(l.signs, low)
		l.evicted = max(l.evicted, low)
	}
}

// claimantLocked is the node that claimed epoch h of sub, "" when this
// node's follower did not see (or no longer remembers) that claim. Must
// hold j.mu.
func (j *journal) claimantLocked(sub string, h int64) string {
	if l := j.lives[sub]; l != nil {
		for _, c := range l.claims {
			if c.epoch == h {
				return c.node
			}
		}
	}
	return ""
}

// signOfLifeLocked bounds, on this node's clock, when holder h last showed
// it was alive before the first claim newer than h: a moment at or after
// the journal write of h's last renewal (or claim, or checkpoint) that can
// extend its lease. With the follower past the asking claim, every such
// write at or after the follower's start offsets was seen: the last one
// seen bounds it; when none was, they all precede the start (startAt). A
// forgotten epoch is bounded by the first newer claim still remembered.
// false: nothing is known (the caller counts from its own claim). Must
// hold j.mu.
func (j *journal) signOfLifeLocked(sub string, h int64) (time.Time, bool) {
	l := j.lives[sub]
	if l == nil {
		return time.Time{}, false
	}
	if h <= l.evicted {
		for _, c := range l.claims {
			if c.epoch > h {
				return c.at, true
			}
		}
		return time.Time{}, false
	}
	var at time.Time
	found := false
	if t, ok := l.signs[h]; ok {
		at, found = t, true
	}
	for _, c := range l.claims {
		if c.epoch == h && c.at.After(at) {
			at, found = c.at, true
		}
	}
	if !found {
		at = j.startAt
		if j.quietFloor.After(at) {
			at = j.quietFloor
		}
	}
	return at, true
}

// replay folds the subscription's journal records from the checkpoint the
// group commit names (or the whole partition when none) to its current
// end into the takeover state; without a checkpoint the commit metadata is
// the starting state.
func (e *Cluster) replay(ctx context.Context, j *journal, p int32, sub string, pcs map[int32]partCommit) (*takeover, error) {
	tk := &takeover{parts: map[int32]*journalPart{}, acked: map[string]bool{}, rejected: map[string]*Rejection{}}
	from := int64(-1)
	for pp, pc := range pcs {
		tk.parts[pp] = &journalPart{P: pp, C: pc.Offset, R: pc.ReadEnd, H: pc.ReadEnd, A: pc.Attempts}
		if pc.Journal >= 0 && (from < 0 || pc.Journal < from) {
			from = pc.Journal
		}
	}
	ends, err := e.endOffsets(ctx, j.topic)
	if err != nil {
		return nil, err
	}
	lo, ok := ends.Lookup(j.topic, p)
	if !ok || lo.Offset <= max(from, 0) {
		return tk, nil
	}
	err = j.readRange(ctx, p, from, lo.Offset, func(r *kgo.Record) {
		if string(r.Key) != sub {
			return
		}
		if rec, ok := j.parse(r); ok {
			tk.fold(rec)
		}
	})
	if err != nil {
		return nil, err
	}
	return tk, nil
}

// readRange hands fn every record of partition p from offset from (-1:
// the start) up to end on a short-lived client. A fetch error ends it (logged and counted):
// a takeover must not fold a journal with a hole in it. Records that
// retention removed (the first offset read is past from) are logged and
// counted; the group commit's metadata stands in for them.
func (j *journal) readRange(ctx context.Context, p int32, from, end int64, fn func(*kgo.Record)) error {
	start := kgo.NewOffset().AtStart()
	if from >= 0 {
		start = kgo.NewOffset().At(from)
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), j.e.cfg.ClientOpts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{j.topic: {p: start}}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return fmt.Errorf("durable: journal replay client: %w", err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("durable: replay %s: %w", j.topic, err)
		}
		var ferr error
		fs.EachError(func(topic string, fp int32, err error) {
			j.e.metrics.journalFetchError("replay")
			j.e.cfg.Logger.Warn().Err(err).Str("topic", topic).Int32("partition", fp).Msg("durable: journal replay fetch")
			if ferr == nil {
				ferr = fmt.Errorf("durable: replay %s partition %d: %w", topic, fp, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		last := int64(-1)
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			if from >= 0 && r.Offset > from {
				j.e.metrics.journalSkipped("journal_retention")
				j.e.cfg.Logger.Warn().Str("topic", j.topic).Int32("partition", p).Int64("from", from).Int64("first", r.Offset).
					Msg("durable: journal records gone (retention): the commit metadata stands in for them")
			}
			from = -1 // checked on the first record only
			last = r.Offset
			if r.Offset < end {
				fn(r)
			}
		}
		if last+1 >= end {
			return nil
		}
	}
}

// fold applies one journal record of the subscription.
func (tk *takeover) fold(rec journalRecord) {
	switch rec.T {
	case jCkpt:
		tk.parts = map[int32]*journalPart{}
		for i := range rec.Parts {
			jp := rec.Parts[i]
			tk.parts[jp.P] = &jp
		}
		tk.acked, tk.rejected = map[string]bool{}, map[string]*Rejection{}
		tk.foldAcks(rec)
	case jDeliver:
		for p, hw := range rec.HW {
			if jp := tk.parts[p]; jp != nil {
				jp.H = max(jp.H, hw)
			}
		}
		for p, att := range rec.Att {
			jp := tk.parts[p]
			if jp == nil {
				continue
			}
			if jp.A == nil {
				jp.A = map[int64]int{}
			}
			for o, n := range att {
				if o >= jp.C {
					jp.A[o] = max(jp.A[o], n)
				}
			}
		}
	case jAcks:
		tk.foldAcks(rec)
	}
}

func (tk *takeover) foldAcks(rec journalRecord) {
	for _, id := range rec.Acks {
		if len(tk.acked) < maxBufferedAcks {
			tk.acked[id] = true
		}
	}
	for _, r := range rec.Rejects {
		// a retryable rejection leaves the event pending: the next holder
		// delivers it again anyway
		if !r.Retry && len(tk.rejected) < maxBufferedAcks {
			tk.rejected[r.ID] = &Rejection{Code: r.Code, Message: r.Message}
		}
	}
}

// checkpoint writes the takeover state as a checkpoint of epoch and
// commits it to the group with holder h.
func (e *Cluster) checkpoint(ctx context.Context, j *journal, req DurableRequest, topic string, tag cursor.TopicTag, parts int32, epoch int64, tk *takeover, h int64) error {
	rec := journalRecord{T: jCkpt, Node: e.node, Epoch: epoch}
	for _, jp := range tk.parts {
		rec.Parts = append(rec.Parts, *jp)
	}
	for id := range tk.acked {
		rec.Acks = append(rec.Acks, id)
	}
	for id, r := range tk.rejected {
		rec.Rejects = append(rec.Rejects, journalRejection{ID: id, Code: r.Code, Message: r.Message})
	}
	off, err := j.produce(ctx, req.SubscriptionID, j.partition(req.SubscriptionID), rec)
	if err != nil {
		return err
	}
	return commitDurable(ctx, e.adm, req.Group, topic, tag, parts, commitsOf(rec.Parts, off, h))
}

// commitsOf turns checkpointed partitions into group commits: the
// committed offset with up to MaxCommittedAttempts attempts in the
// metadata (a fallback for when the journal is gone), the checkpoint's
// journal offset and the holder.
func commitsOf(jps []journalPart, journalOff, holder int64) []partCommit {
	pcs := make([]partCommit, 0, len(jps))
	for _, jp := range jps {
		pc := partCommit{Partition: jp.P, Offset: jp.C, ReadEnd: jp.C, Attempts: map[int64]int{}, Journal: journalOff, Holder: holder}
		for o := jp.C; o < jp.H; o++ {
			n, listed := jp.A[o]
			if !listed && o >= jp.R {
				n, listed = 1, true
			}
			if listed {
				if len(pc.Attempts) == MaxCommittedAttempts {
					break // later ones are delivered as new
				}
				pc.Attempts[o] = n
			}
			pc.ReadEnd = o + 1
		}
		pcs = append(pcs, pc)
	}
	return pcs
}

// Hand says whether d may go to the client now: the stream was not fenced
// and its lease runs. Bindings call it right before writing each delivery
// (a holder that was stopped, e.g. SIGSTOPped, past its lease must not
// write what waited in its queues when it wakes). A delivery that may not
// go is taken back (its attempt uncounted) and the stream ends
// (ErrLeaseLost, unless it was fenced). Dead-letter notices always go:
// they report what was already written.
func (s *DurableStream) Hand(d DurableDelivery) bool {
	if d.Kind != DurableEvent || (!s.fenced.Load() && s.w.holds()) {
		return true
	}
	s.mu.Lock()
	s.unsendLocked([]DurableDelivery{d})
	s.mu.Unlock()
	s.end(ErrLeaseLost) // the first reason wins: a fence stays a fence
	return false
}

// Next is Deliveries().Next through Hand: a delivery that may not go is
// skipped (taken back). With Ready and OnReady, the stream is a
// transport.Source for a binding that writes what Next returns at once.
func (s *DurableStream) Next() (DurableDelivery, bool, bool) {
	for {
		d, ok, ended := s.q.Next()
		if !ok || s.Hand(d) {
			return d, ok, ended
		}
	}
}

// WriteDeadline is the end of the stream's lease: a transport bounds each
// write of its deliveries by it, so that a write under way when the
// holder's process stalled (SIGSTOP, a frozen VM) fails on waking instead
// of finishing after a newer holder may have started delivering.
func (s *DurableStream) WriteDeadline() time.Time {
	return monoBase.Add(time.Duration(s.w.lease.Load()))
}

// Ready receives a token when Next may return a delivery or the end.
func (s *DurableStream) Ready() <-chan struct{} { return s.q.Ready() }

// OnReady is Deliveries().OnReady (a parked consumer's wake-up).
func (s *DurableStream) OnReady(fn func()) { s.q.OnReady(fn) }

// leaseErr is nil while the stream may deliver: not fenced, lease running.
func (s *DurableStream) leaseErr() error {
	if !s.w.holds() {
		return ErrLeaseLost
	}
	return nil
}
