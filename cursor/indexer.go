package cursor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/internal/gather"
)

// IndexerConfig configures an Indexer. Zero values mean the stated defaults.
type IndexerConfig struct {
	// EventsTopic is the tenant topic to index (aep.<tenant>.events).
	EventsTopic string
	// IndexTopic is the compacted topic checkpoints go to
	// (aep.<tenant>.index); it must exist. Event partition p writes to index
	// partition p mod (index partitions).
	IndexTopic string
	// Group is the consumer group that spreads event partitions over
	// indexer instances and holds their progress (the relay uses
	// <events topic>.indexer).
	Group string
	// ClientOpts reach the cluster (seed brokers, TLS, SASL). The Indexer
	// adds its own consumer, group and producer options.
	ClientOpts []kgo.Opt
	// Distance (M) is the partition-offset distance after which a session's
	// next event gets a checkpoint: every uncheckpointed event of a session
	// lies less than Distance offsets after the session's previous
	// checkpoint, which bounds every resume scan. Default 4096.
	Distance int64
	// Every (N) also checkpoints a session after this many of its own
	// events, however dense. Default 1024.
	Every int
	// Metadata refresh interval for the topic ID and partition count.
	// Default 10s.
	MetadataInterval time.Duration
	// Gather is how long the indexer waits after a poll at the tail
	// (internal/gather) before it polls again, so that under single events
	// it fetches, writes its markers and commits once for many events, not
	// once each. The index lags by up to this much more; a lagging index
	// only makes resolves scan further. Default 250ms; negative: no wait.
	Gather time.Duration
}

func (c *IndexerConfig) fill() error {
	if c.EventsTopic == "" || c.IndexTopic == "" || c.Group == "" {
		return errors.New("cursor: indexer needs EventsTopic, IndexTopic and Group")
	}
	if c.Distance <= 0 {
		c.Distance = 4096
	}
	if c.Every <= 0 {
		c.Every = 1024
	}
	if c.MetadataInterval <= 0 {
		c.MetadataInterval = 10 * time.Second
	}
	if c.Gather == 0 {
		c.Gather = 250 * time.Millisecond
	}
	return nil
}

// Indexer consumes an events topic and writes the session checkpoints and
// partition markers the Resolver reads. It owns one goroutine, started by
// NewIndexer and stopped by Close. Several Indexers (one per gateway node)
// share the work through the consumer group.
type Indexer struct {
	cfg  IndexerConfig
	cl   *kgo.Client
	adm  *kadm.Client
	stop context.CancelFunc
	done chan struct{}

	mu      sync.Mutex
	err     error
	indexed map[int32]int64 // partition -> indexed frontier (committed)
}

// NewIndexer starts indexing. The returned Indexer runs until Close.
func NewIndexer(cfg IndexerConfig) (*Indexer, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	opts := append([]kgo.Opt{}, cfg.ClientOpts...)
	opts = append(opts,
		kgo.ConsumeTopics(cfg.EventsTopic),
		kgo.ConsumerGroup(cfg.Group),
		// A crashed node stays a member until its session times out, and
		// until then a joining or leaving node waits for the rebalance (so a
		// restarted gateway's shutdown would wait the default 45 s). The
		// broker minimum keeps that wait short.
		kgo.SessionTimeout(6*time.Second),
		kgo.HeartbeatInterval(time.Second),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(cfg.IndexTopic),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("cursor: indexer client: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ix := &Indexer{cfg: cfg, cl: cl, adm: kadm.NewClient(cl), stop: cancel, done: make(chan struct{}), indexed: map[int32]int64{}}
	go ix.run(ctx)
	return ix, nil
}

// Close stops the indexer, waits for its goroutine, leaves the group and
// closes its client. It returns the error that stopped the indexer early,
// if any.
func (ix *Indexer) Close() error {
	ix.stop()
	<-ix.done
	ix.cl.Close()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.err
}

// Indexed returns the offset below which partition p is indexed, as far as
// this instance knows, and whether it has indexed p at all.
func (ix *Indexer) Indexed(p int32) (int64, bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	x, ok := ix.indexed[p]
	return x, ok
}

// sessionState is what the indexer remembers of a session between events.
type sessionState struct {
	lastCP int64
	since  int
}

type partitionState struct {
	sessions map[string]*sessionState
	sweepAt  int64
}

type indexRun struct {
	ix          *Indexer
	meta        TopicState
	metaAt      time.Time
	indexParts  int32
	parts       map[int32]*partitionState
	pendingRecs []*kgo.Record
}

func (ix *Indexer) run(ctx context.Context) {
	defer close(ix.done)
	r := &indexRun{ix: ix, parts: map[int32]*partitionState{}}
	err := r.loop(ctx)
	if err != nil && ctx.Err() == nil {
		ix.mu.Lock()
		ix.err = err
		ix.mu.Unlock()
	}
}

func (r *indexRun) loop(ctx context.Context) error {
	for {
		if err := r.refreshMeta(ctx); err != nil {
			if ctx.Err() != nil {
				return nil //nolint:nilerr // the run was stopped: not a failure
			}
			return err
		}
		fs := r.ix.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			r.ix.cl.AllowRebalance()
			return nil //nolint:nilerr // the run was stopped: not a failure
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.Canceled) {
				ferr = err
			}
		})
		if ferr != nil && fs.NumRecords() == 0 {
			r.ix.cl.AllowRebalance()
			continue // kgo retries retryable errors itself; keep polling
		}
		decoded, err := r.index(ctx, fs)
		r.ix.cl.AllowRebalance()
		if err != nil {
			if ctx.Err() != nil {
				return nil //nolint:nilerr // the run was stopped: not a failure
			}
			return err
		}
		if gather.AtTail(decoded, 0) {
			gather.Wait(ctx, r.ix.cfg.Gather)
		}
	}
}

func (r *indexRun) refreshMeta(ctx context.Context) error {
	if time.Since(r.metaAt) < r.ix.cfg.MetadataInterval && r.metaAt != (time.Time{}) {
		return nil
	}
	st, err := LoadTopicState(ctx, r.ix.adm, r.ix.cfg.EventsTopic)
	if err != nil {
		return err
	}
	tds, err := r.ix.adm.ListTopics(ctx, r.ix.cfg.IndexTopic)
	if err != nil {
		return fmt.Errorf("cursor: metadata of %s: %w", r.ix.cfg.IndexTopic, err)
	}
	td, ok := tds[r.ix.cfg.IndexTopic]
	if !ok || td.Err != nil || len(td.Partitions) == 0 {
		return fmt.Errorf("cursor: index topic %s unavailable: %v", r.ix.cfg.IndexTopic, td.Err)
	}
	if st.ID != r.meta.ID || st.Partitions != r.meta.Partitions {
		r.parts = map[int32]*partitionState{} // new layout: start every session afresh
	}
	r.meta, r.metaAt, r.indexParts = st, time.Now(), int32(len(td.Partitions))
	return nil
}

// index processes one poll: checkpoints, then one marker per partition,
// all acknowledged by the index topic before the group commit. decoded is
// the bytes of the poll's records (keys and values), for the gather.
func (r *indexRun) index(ctx context.Context, fs kgo.Fetches) (decoded int, err error) {
	cfg := &r.ix.cfg
	tag := r.meta.ID.Tag()
	next := map[int32]int64{}
	r.pendingRecs = r.pendingRecs[:0]
	fs.EachRecord(func(rec *kgo.Record) {
		decoded += len(rec.Key) + len(rec.Value)
		next[rec.Partition] = rec.Offset + 1
		pos, _, ok := sessionEvent(rec, "")
		if !ok {
			return
		}
		ps := r.parts[rec.Partition]
		if ps == nil {
			ps = &partitionState{sessions: map[string]*sessionState{}}
			r.parts[rec.Partition] = ps
		}
		r.sweep(ps, rec.Offset)
		ss := ps.sessions[pos.Session]
		if ss != nil && rec.Offset <= ss.lastCP {
			return // re-delivered after a restart: already checkpointed
		}
		if ss == nil || rec.Offset-ss.lastCP >= cfg.Distance || ss.since+1 >= cfg.Every {
			if ss == nil {
				ss = &sessionState{}
				ps.sessions[pos.Session] = ss
			}
			ss.lastCP, ss.since = rec.Offset, 0
			l := layout{tag: tag, partitions: r.meta.Partitions, partition: rec.Partition}
			c := checkpoint{offset: rec.Offset, epoch: pos.Epoch, seq: pos.Seq, distance: cfg.Distance}
			r.pendingRecs = append(r.pendingRecs, &kgo.Record{
				Key:       checkpointKey(tag, pos.Session, rec.Offset),
				Value:     checkpointValue(l, c),
				Partition: rec.Partition % r.indexParts,
			})
			return
		}
		ss.since++
	})
	if len(next) == 0 {
		return decoded, nil
	}
	for p, x := range next {
		r.pendingRecs = append(r.pendingRecs, &kgo.Record{
			Key:       markerKey(tag, p),
			Value:     markerValue(r.meta.Partitions, x),
			Partition: p % r.indexParts,
		})
	}
	if err := r.ix.cl.ProduceSync(ctx, r.pendingRecs...).FirstErr(); err != nil {
		return decoded, fmt.Errorf("cursor: write index: %w", err)
	}
	if err := r.ix.cl.CommitUncommittedOffsets(ctx); err != nil {
		return decoded, fmt.Errorf("cursor: commit indexer offsets: %w", err)
	}
	r.ix.mu.Lock()
	for p, x := range next {
		r.ix.indexed[p] = x
	}
	r.ix.mu.Unlock()
	return decoded, nil
}

// sweep forgets sessions whose last checkpoint is at least Distance behind:
// their next event is checkpointed whatever the state says, so the state
// carries nothing. Run every Distance offsets, it keeps the state bounded by
// the sessions active in the last 2*Distance offsets, at O(1) amortised.
func (r *indexRun) sweep(ps *partitionState, off int64) {
	if off < ps.sweepAt {
		return
	}
	for s, ss := range ps.sessions {
		if off-ss.lastCP >= r.ix.cfg.Distance {
			delete(ps.sessions, s)
		}
	}
	ps.sweepAt = off + r.ix.cfg.Distance
}
