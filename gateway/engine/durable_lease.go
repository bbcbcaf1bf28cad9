package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/cursor"
)

// ErrTakenOver ends a durable stream (or refuses its opening) because a
// newer stream of the same subscription claimed it, on any node: the
// newest claim wins.
var ErrTakenOver = errors.New("engine: a newer stream of the subscription took it over")

// ErrLeaseLost ends a durable stream whose lease renewals failed for
// LeaseHold: another node may take it over, so it stops delivering.
var ErrLeaseLost = errors.New("engine: the stream's lease could not be renewed")

// HeldError refuses a stream whose holder keeps renewing its lease without
// giving way (its node does not see the journal): it names the holder.
type HeldError struct {
	Node  string
	Epoch int64
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("engine: the subscription's stream is held by node %s (epoch %d), which did not give way", e.Node, e.Epoch)
}

// maxClaimWait bounds how long a claimant waits for a holder that renews
// but does not release.
const maxClaimWait = 10 * time.Second

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
// group commit's h) released or its lease expired, folds the journal from
// the last checkpoint into the takeover state, checkpoints it with h = the
// new epoch, and checks that no newer claim appeared meanwhile.
func (e *Engine) claim(ctx context.Context, req DurableRequest, topic string, tag cursor.TopicTag, parts int32) (*journal, *watcher, *takeover, error) {
	j, err := e.journalFor(ctx, req.Tenant)
	if err != nil {
		return nil, nil, nil, err
	}
	w, err := j.register(req.SubscriptionID)
	if err != nil {
		return nil, nil, nil, err
	}
	tk, err := e.claimWith(ctx, j, w, req, topic, tag, parts)
	if err != nil {
		j.unregister(w)
		return nil, nil, nil, err
	}
	return j, w, tk, nil
}

func (e *Engine) claimWith(ctx context.Context, j *journal, w *watcher, req DurableRequest, topic string, tag cursor.TopicTag, parts int32) (*takeover, error) {
	sub, p := req.SubscriptionID, j.partition(req.SubscriptionID)
	start := time.Now()
	off, err := j.produce(ctx, sub, p, journalRecord{T: jClaim, Node: e.node})
	if err != nil {
		return nil, err
	}
	epoch := off + 1 // 0 is "no holder"
	j.mu.Lock()
	w.epoch, w.renewOK = epoch, start
	j.mu.Unlock()
	_, pcs, _, err := fetchDurable(ctx, e.adm, req.Group, topic)
	if err != nil {
		return nil, err
	}
	if h := holderOf(pcs); h > 0 && h < epoch {
		if err := j.awaitRelease(ctx, w, h, start); err != nil {
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
	// the holder mark is committed now: a newer claimant waits LeaseTTL
	// from a later moment, so the lease counts from here
	j.mu.Lock()
	w.renewOK = time.Now()
	j.mu.Unlock()
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
			e.cfg.Logger.Warn().Err(err).Str("group", req.Group).Msg("engine: hand-over commit")
		}
		_, _ = j.produce(ctx, sub, p, journalRecord{T: jRelease, Node: e.node, Epoch: epoch})
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

// awaitRelease waits until holder h released, or did not renew for
// LeaseTTL since our claim (at start) or its last renewal seen, whichever
// is later. A newer claim than ours ends the wait with ErrTakenOver; a
// holder that renews but never gives way for maxClaimWait with a
// *HeldError.
func (j *journal) awaitRelease(ctx context.Context, w *watcher, h int64, start time.Time) error {
	for {
		j.mu.Lock()
		newer, released, err := w.maxClaim > w.epoch, w.released[h], j.err
		deadline := start.Add(LeaseTTL)
		if t, ok := w.renewed[h]; ok && t.Add(LeaseTTL).After(deadline) {
			deadline = t.Add(LeaseTTL)
		}
		node := w.nodes[h]
		j.mu.Unlock()
		switch {
		case newer:
			return ErrTakenOver
		case released:
			return nil
		case err != nil:
			return err
		}
		now := time.Now()
		if !now.Before(deadline) {
			return nil // the lease expired: the holder stopped delivering by now
		}
		if now.Sub(start) > maxClaimWait {
			return &HeldError{Node: node, Epoch: h}
		}
		tm := time.NewTimer(deadline.Sub(now))
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

// replay folds the subscription's journal records from the checkpoint the
// group commit names (or the whole partition when none) to its current
// end into the takeover state; without a checkpoint the commit metadata is
// the starting state.
func (e *Engine) replay(ctx context.Context, j *journal, p int32, sub string, pcs map[int32]partCommit) (*takeover, error) {
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
	end := lo.Offset
	start := kgo.NewOffset().AtStart()
	if from >= 0 {
		start = kgo.NewOffset().At(from)
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), e.cfg.ClientOpts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{j.topic: {p: start}}))...)
	if err != nil {
		return nil, fmt.Errorf("engine: journal replay client: %w", err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("engine: replay %s: %w", j.topic, err)
		}
		last := int64(-1)
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			last = r.Offset
			if r.Offset >= end || string(r.Key) != sub {
				continue
			}
			var rec journalRecord
			if json.Unmarshal(r.Value, &rec) == nil {
				tk.fold(rec)
			}
		}
		if last+1 >= end {
			return tk, nil
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
		if len(tk.rejected) < maxBufferedAcks {
			tk.rejected[r.ID] = &Rejection{Code: r.Code, Message: r.Message}
		}
	}
}

// checkpoint writes the takeover state as a checkpoint of epoch and
// commits it to the group with holder h.
func (e *Engine) checkpoint(ctx context.Context, j *journal, req DurableRequest, topic string, tag cursor.TopicTag, parts int32, epoch int64, tk *takeover, h int64) error {
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
