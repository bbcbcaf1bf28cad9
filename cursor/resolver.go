package cursor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ResolverConfig configures a Resolver.
type ResolverConfig struct {
	// EventsTopic and IndexTopic as given to the Indexer.
	EventsTopic string
	IndexTopic  string
	// ClientOpts reach the cluster. The Resolver makes one client for
	// reading the index topic and one for metadata and scans.
	ClientOpts []kgo.Opt
	// FetchMaxBytes bounds each scan fetch. Default 1 MiB.
	FetchMaxBytes int32
}

// Resolver maps a dialect R position (session, epoch, seq) to the offset
// where delivery strictly after it starts. It keeps the index topic in
// memory (one goroutine, started by NewResolver, stopped by Close) and
// answers with a scan of at most one checkpoint distance of one partition,
// plus the stretch the indexer has not reached yet. Safe for concurrent use.
type Resolver struct {
	cfg    ResolverConfig
	idx    *kgo.Client // consumes the index topic
	cl     *kgo.Client // metadata and scans
	adm    *kadm.Client
	scan   *scanner
	view   *indexView
	part   kgo.TopicPartitioner
	stop   context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	bad    int64           // malformed index records skipped; guarded by mu
	readTo map[int32]int64 // index partition -> offset after the last record applied; guarded by mu
}

// NewResolver starts reading the index topic from its beginning.
func NewResolver(cfg ResolverConfig) (*Resolver, error) {
	if cfg.EventsTopic == "" || cfg.IndexTopic == "" {
		return nil, errors.New("cursor: resolver needs EventsTopic and IndexTopic")
	}
	idxOpts := append(append([]kgo.Opt{}, cfg.ClientOpts...),
		kgo.ConsumeTopics(cfg.IndexTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	idx, err := kgo.NewClient(idxOpts...)
	if err != nil {
		return nil, fmt.Errorf("cursor: resolver index client: %w", err)
	}
	cl, err := kgo.NewClient(cfg.ClientOpts...)
	if err != nil {
		idx.Close()
		return nil, fmt.Errorf("cursor: resolver client: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Resolver{
		cfg: cfg, idx: idx, cl: cl, adm: kadm.NewClient(cl),
		scan: newScanner(cl, cfg.FetchMaxBytes), view: newIndexView(),
		part: kgo.StickyKeyPartitioner(nil).ForTopic(cfg.EventsTopic),
		stop: cancel, done: make(chan struct{}), readTo: map[int32]int64{},
	}
	go r.follow(ctx)
	return r, nil
}

// Close stops following the index, waits for the goroutine and closes the
// clients.
func (r *Resolver) Close() {
	r.stop()
	<-r.done
	r.idx.Close()
	r.cl.Close()
}

func (r *Resolver) follow(ctx context.Context) {
	defer close(r.done)
	for {
		fs := r.idx.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fs.EachRecord(func(rec *kgo.Record) {
			err := r.view.apply(rec.Key, rec.Value)
			r.mu.Lock()
			if err != nil {
				r.bad++
			}
			r.readTo[rec.Partition] = rec.Offset + 1
			r.mu.Unlock()
		})
	}
}

// IndexStats reports how many index records the Resolver has applied, how
// many checkpoints it holds, and how many malformed records it skipped.
func (r *Resolver) IndexStats() (applied, checkpoints, malformed int64) {
	applied, checkpoints = r.view.stats()
	r.mu.Lock()
	defer r.mu.Unlock()
	return applied, checkpoints, r.bad
}

// CaughtUp reports whether the Resolver has read the index topic up to the
// high watermarks it has now. A lagging index only makes most resolves scan
// longer; a resolve in a partition whose log start moved waits for it
// (syncView), because only checkpoints can tell that a position was lost.
func (r *Resolver) CaughtUp(ctx context.Context) (bool, error) {
	ends, err := r.adm.ListEndOffsets(ctx, r.cfg.IndexTopic)
	if err != nil {
		return false, err
	}
	caught := true
	r.mu.Lock()
	ends.Each(func(o kadm.ListedOffset) {
		// The record just below the end is never compacted away (it is the
		// newest of its key), so having applied it means having read all.
		if o.Err == nil && o.Offset > 0 && r.readTo[o.Partition] < o.Offset {
			caught = false
		}
	})
	r.mu.Unlock()
	return caught, nil
}

// syncWait bounds how long a resolve waits for the index follower.
const syncWait = 5 * time.Second

// syncView waits (at most syncWait, or until ctx ends) until the follower
// has applied every index record written before the call. On timeout the
// resolve goes on with what the view holds.
func (r *Resolver) syncView(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, syncWait)
	defer cancel()
	for {
		ok, err := r.CaughtUp(ctx)
		if ok || err != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Resume is where delivery of a session restarts.
type Resume struct {
	Partition int32
	// Offset is the first offset to read: every event of the session after
	// the requested position is at or above it. Delivery reads the
	// partition from here, keeps the session's events and, per AEP-0003 §7,
	// may pass on below-position backfill found later in the log.
	Offset int64
	// Next is the first event of the session after the position, when the
	// resolver met it (nil when the session has nothing after it yet).
	Next *Position
	// NextOffset is Next's offset, -1 when Next is nil.
	NextOffset int64
	// Gap is set when delivery cannot continue exactly after the position.
	Gap *Gap
	// Scanned is the number of records read to resolve: the resume cost.
	Scanned int
}

// Resolve finds where delivery strictly after pos starts, for the session
// pos names. Its cost is one metadata round trip, an in-memory search, and
// a scan of at most one checkpoint distance of one partition plus the part
// of the partition the indexer has not reached yet.
func (r *Resolver) Resolve(ctx context.Context, pos Position) (Resume, error) {
	if pos.Session == "" || pos.Epoch < 0 || pos.Seq < 0 {
		return Resume{}, errf(ErrMalformed, "position needs a session and non-negative epoch and seq")
	}
	st, err := LoadTopicState(ctx, r.adm, r.cfg.EventsTopic)
	if err != nil {
		return Resume{}, err
	}
	p := r.partitionOf(pos.Session, st.Partitions)
	if st.Start[p] > 0 {
		// Part of the partition is gone: whether the position is among the
		// lost events is decided by the checkpoints, so read every one the
		// index holds now before deciding.
		r.syncView(ctx)
	}
	l := layout{tag: st.ID.Tag(), partitions: st.Partitions, partition: p}
	q := r.view.lookup(pos.Session, l, pos)

	rs := resolveScan{pos: pos, logStart: st.Start[p], last: -1, next: -1}
	switch {
	case q.hasBefore && q.hasAfter:
		// Everything of the session between the two checkpoints lies below
		// before+distance; the first event past pos is in there or is after.
		rs.last = q.before.offset
		to := min(q.before.offset+q.before.distance, q.after.offset)
		if err := rs.run(ctx, r, &st, p, q.before.offset+1, to); err != nil {
			return Resume{}, err
		}
		if rs.next < 0 {
			rs.setNext(q.after.offset, q.after.pos())
		}
	case q.hasBefore:
		rs.last = q.before.offset
		from := q.before.offset + 1
		near := q.before.offset + q.before.distance
		if q.marker >= 0 && near < q.marker {
			// Indexed stretch: the session has nothing in [near, marker).
			if err := rs.run(ctx, r, &st, p, from, near); err != nil {
				return Resume{}, err
			}
			from = q.marker
		}
		if rs.next < 0 {
			if err := rs.run(ctx, r, &st, p, from, st.End[p]); err != nil {
				return Resume{}, err
			}
		}
	case q.hasAfter:
		// The session's first indexed event is already past pos, and no
		// event of it is older than its first checkpoint.
		rs.setNext(q.after.offset, q.after.pos())
	default:
		// Nothing indexed for the session: it can only be in the stretch the
		// indexer has not reached (all of it when no marker exists yet).
		from := st.Start[p]
		if q.marker >= 0 {
			from = max(q.marker, st.Start[p])
			if q.marker < st.Start[p] {
				rs.unseenDeleted = true
			}
		}
		if err := rs.run(ctx, r, &st, p, from, st.End[p]); err != nil {
			return Resume{}, err
		}
	}
	res := rs.result(p, st, q)
	if res.Gap != nil && res.Gap.Earliest == nil {
		if err := r.earliest(ctx, &st, l, pos.Session, &res); err != nil {
			return Resume{}, err
		}
	}
	return res, nil
}

// earliest fills in the gap's Earliest: the session's first event at or
// above the log start. By the index invariant it is either within one
// distance after the last checkpoint below the log start, or it is the
// first checkpoint at or above it (or, past the marker, in the unindexed
// stretch, which is not searched here).
func (r *Resolver) earliest(ctx context.Context, st *TopicState, l layout, session string, res *Resume) error {
	start := st.Start[l.partition]
	below, above, hasBelow, hasAbove := r.view.around(session, l, start)
	if hasBelow && below.offset+below.distance > start {
		to := below.offset + below.distance
		if hasAbove {
			to = min(to, above.offset)
		}
		n, err := r.scan.scan(ctx, st, l.partition, start, to, func(rec *kgo.Record) bool {
			ep, _, ok := sessionEvent(rec, session)
			if ok {
				res.Gap.Earliest = &ep
			}
			return !ok
		})
		res.Scanned += n
		if err != nil || res.Gap.Earliest != nil {
			return err
		}
	}
	if hasAbove {
		res.Gap.Earliest = &Position{Session: session, Epoch: above.epoch, Seq: above.seq}
	}
	return nil
}

func (r *Resolver) partitionOf(session string, n int32) int32 {
	return int32(r.part.Partition(&kgo.Record{Key: []byte(session)}, int(n)))
}

// resolveScan accumulates what a scan learned: the last event of the
// session at or before pos (last), the first one after it (next).
type resolveScan struct {
	pos      Position
	logStart int64
	last     int64 // offset of the last positioned session event <= pos; -1 none
	next     int64 // offset of the first positioned session event > pos; -1 none
	nextPos  Position
	first    *Position // first session event seen at or above the log start
	scanned  int
	scanEnd  int64 // where the last scan stopped, for the "nothing yet" answer
	// clipped: part of a range that had to be read was below the log start.
	clipped       bool
	unseenDeleted bool
}

func (rs *resolveScan) setNext(off int64, p Position) {
	rs.next, rs.nextPos = off, p
	rs.nextPos.Session = rs.pos.Session
}

func (rs *resolveScan) run(ctx context.Context, r *Resolver, st *TopicState, p int32, from, to int64) error {
	if from < rs.logStart {
		rs.clipped = true
		from = rs.logStart
	}
	rs.scanEnd = max(rs.scanEnd, from)
	if from >= to {
		return nil
	}
	n, err := r.scan.scan(ctx, st, p, from, to, func(rec *kgo.Record) bool {
		rs.scanEnd = rec.Offset + 1
		ep, match, ok := sessionEvent(rec, rs.pos.Session)
		if !match || !ok {
			return true
		}
		if rs.first == nil {
			f := ep
			rs.first = &f
		}
		if ep.Compare(rs.pos) > 0 {
			rs.setNext(rec.Offset, ep)
			return false
		}
		rs.last = rec.Offset
		return true
	})
	rs.scanned += n
	if err == nil && rs.next < 0 {
		rs.scanEnd = max(rs.scanEnd, to)
	}
	return err
}

func (rs *resolveScan) result(p int32, st TopicState, q lookup) Resume {
	res := Resume{Partition: p, Scanned: rs.scanned, NextOffset: -1}
	if rs.next >= 0 {
		np := rs.nextPos
		res.Next, res.NextOffset = &np, rs.next
	}
	switch {
	case rs.last >= 0:
		res.Offset = rs.last + 1
	case rs.next >= 0:
		res.Offset = rs.next
	default:
		res.Offset = rs.scanEnd // nothing of the session yet: from where we looked last
	}
	start := st.Start[p]
	lastSeen := rs.last >= start                 // the last event <= pos is still in the log
	lost := (rs.next >= 0 && rs.next < start) || // the first event after pos is gone
		(rs.clipped && !lastSeen) || // its predecessor stretch was partly deleted unseen
		rs.unseenDeleted
	if lost {
		g := &Gap{Partition: p, Requested: -1, RestartAt: start, Reason: GapRetention}
		if rs.last >= 0 {
			g.Requested = rs.last + 1
		}
		if rs.first != nil {
			f := *rs.first
			g.Earliest = &f
		}
		res.Gap, res.Offset = g, start
		return res
	}
	if res.Offset < start {
		res.Offset = start // only unpositioned events were lost: nothing to tell
	}
	if !q.hasBefore && len(q.otherLayouts) > 0 {
		reason := GapPartitionsChanged
		for _, ol := range q.otherLayouts {
			if ol.tag != st.ID.Tag() {
				reason = GapTopicRecreated
			}
		}
		res.Gap = &Gap{Partition: p, Requested: -1, RestartAt: res.Offset, Reason: reason}
		if rs.first != nil {
			f := *rs.first
			res.Gap.Earliest = &f
		}
	}
	return res
}
