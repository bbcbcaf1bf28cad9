package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// The subscription journal (docs/durable-cluster.md) is one topic per
// tenant (Naming.Events + ".subjournal"), keyed by subscription id so one
// partition orders everything of a subscription: stream claims and their
// releases, lease renewals, acknowledgements and rejections posted on any
// node, the read-ahead a holder reserved before delivering, and checkpoints
// of a stream's whole ack state. Every node follows it with one consumer
// per tenant (the journal below), from the end offsets it found on start.

// Journal record kinds.
const (
	jClaim   = "claim"   // a node wants to serve the stream; its offset + 1 is the epoch
	jRelease = "release" // the holder of Epoch stopped delivering and committed
	jRenew   = "renew"   // Node still holds Epochs (sub -> epoch); keyed by node
	jAcks    = "acks"    // Acks and Rejects posted by a consumer
	jDeliver = "deliver" // the holder may deliver below HW; Att: attempts of deliveries below its earlier HW
	jCkpt    = "ckpt"    // the holder's whole state (Parts)
)

// JournalRetention of the journal topic: it must outlive the gap between
// two checkpoints of a subscription (a stream checkpoints at takeover, every
// commit interval with changes, and when it ends).
const JournalRetention = 7 * 24 * time.Hour

// Lease timing: a holder renews every LeaseRenew; it stops delivering when
// no renewal succeeded for LeaseHold; a newcomer takes over LeaseTTL after
// its claim when the holder neither released nor renewed meanwhile.
const (
	LeaseRenew = 1500 * time.Millisecond
	LeaseHold  = 4500 * time.Millisecond
	LeaseTTL   = 6 * time.Second
)

// journalRejection is one rejection in a jAcks record.
type journalRejection struct {
	ID      string `json:"id"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// journalPart is one partition's state in a checkpoint: committed offset
// C, read end R, reserved high-water H >= R (every offset below it may have
// been delivered), the sends of pending offsets in [C, H) (A), the
// rejected ones (X, also in A) and the confirmed hand-overs of pending
// offsets (D: what counts toward max_attempts; absent is none). Offsets in
// [C, R) not in A were done; offsets in [R, H) not in A were delivered
// once.
type journalPart struct {
	P int32                `json:"p"`
	C int64                `json:"c"`
	R int64                `json:"r"`
	H int64                `json:"h"`
	A map[int64]int        `json:"a,omitempty"`
	X map[int64]*Rejection `json:"x,omitempty"`
	D map[int64]int        `json:"d,omitempty"`
}

type journalRecord struct {
	T       string                  `json:"t"`
	Node    string                  `json:"n,omitempty"`
	Epoch   int64                   `json:"e,omitempty"`
	Epochs  map[string]int64        `json:"es,omitempty"`
	Acks    []string                `json:"a,omitempty"`
	Rejects []journalRejection      `json:"r,omitempty"`
	HW      map[int32]int64         `json:"hw,omitempty"`
	Att     map[int32]map[int64]int `json:"at,omitempty"`
	Parts   []journalPart           `json:"p,omitempty"`
	At      time.Time               `json:"ts"`
}

// maxBufferedAcks bounds the acks a claimant keeps before its stream runs
// (past it, those events come again, marked).
const maxBufferedAcks = 1 << 16

// watcher follows one subscription in the journal for a stream of this
// node: claims (fencing), releases and renewals of older epochs, acks.
type watcher struct {
	sub      string
	epoch    int64 // our claim; 0 until it is written
	maxClaim int64 // the newest claim seen (any node)
	nodes    map[int64]string
	released map[int64]bool
	renewed  map[int64]time.Time // last renewal seen, by epoch
	renewOK  time.Time           // our last successful renewal (holder)
	buffered []journalRecord     // acks before the stream attached
	nbuf     int
	stream   *DurableStream
	notify   chan struct{}
}

func (w *watcher) poke() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// journal is this node's follower of one tenant's journal topic.
type journal struct {
	e     *Engine
	topic string
	parts int32
	cl    *kgo.Client

	prog *readProgress

	mu    sync.Mutex
	watch map[string]map[*watcher]struct{} // by subscription id
	err   error                            // the follower stopped
}

// JournalTopic is the tenant's subscription journal.
func (e *Engine) JournalTopic(t tenant.Tenant) string {
	return e.cfg.Naming.Events(t.String()) + ".subjournal"
}

// journalFor returns the tenant's journal follower, creating the topic and
// starting the follower on first use.
func (e *Engine) journalFor(ctx context.Context, t tenant.Tenant) (*journal, error) {
	e.jmu.Lock()
	defer e.jmu.Unlock()
	if j := e.journals[t.String()]; j != nil {
		return j, nil
	}
	topic := e.JournalTopic(t)
	if err := e.createJournal(ctx, topic); err != nil {
		return nil, err
	}
	ends, err := e.endOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	offs := map[int32]kgo.Offset{}
	var parts int32
	ends.Each(func(lo kadm.ListedOffset) {
		offs[lo.Partition] = kgo.NewOffset().At(lo.Offset)
		parts = max(parts, lo.Partition+1)
	})
	if parts == 0 {
		return nil, fmt.Errorf("engine: %s has no partitions", topic)
	}
	j := &journal{e: e, topic: topic, parts: parts, watch: map[string]map[*watcher]struct{}{}, prog: newReadProgress()}
	start := map[int32]int64{}
	for p, o := range offs {
		start[p] = o.EpochOffset().Offset
	}
	j.prog.set(start, nil)
	opts := append(append([]kgo.Opt(nil), e.cfg.ClientOpts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offs}),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.FetchMaxWait(time.Second),
	)
	if j.cl, err = kgo.NewClient(opts...); err != nil {
		return nil, fmt.Errorf("engine: journal client: %w", err)
	}
	if !e.startGoroutines(2) {
		j.cl.Close()
		return nil, ErrClosed
	}
	e.journals[t.String()] = j
	go j.follow(e.ctx)
	go j.renew(e.ctx)
	return j, nil
}

// createJournal creates the journal topic (one partition, delete policy,
// JournalRetention) unless it exists.
func (e *Engine) createJournal(ctx context.Context, topic string) error {
	ret := fmt.Sprint(JournalRetention.Milliseconds())
	cfg := map[string]*string{"cleanup.policy": ptr("delete"), "retention.ms": &ret}
	resp, err := e.adm.CreateTopic(ctx, 1, e.cfg.ReplicationFactor, cfg, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("engine: create topic %s: %w", topic, partitioning.ExplainCreate(err, e.cfg.ReplicationFactor))
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// partition of a subscription's records.
func (j *journal) partition(sub string) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(sub))
	return int32(h.Sum32() % uint32(j.parts))
}

// produce writes rec for key on partition p (acks=all) and returns its
// offset.
func (j *journal) produce(ctx context.Context, key string, p int32, rec journalRecord) (int64, error) {
	rec.At = time.Now().UTC()
	b, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	r := &kgo.Record{Topic: j.topic, Partition: p, Key: []byte(key), Value: b}
	if err := j.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return 0, fmt.Errorf("engine: journal %s: %w", rec.T, err)
	}
	return r.Offset, nil
}

// register starts following sub for a claimant.
func (j *journal) register(sub string) (*watcher, error) {
	w := &watcher{sub: sub, nodes: map[int64]string{}, released: map[int64]bool{}, renewed: map[int64]time.Time{}, notify: make(chan struct{}, 1)}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return nil, j.err
	}
	if j.watch[sub] == nil {
		j.watch[sub] = map[*watcher]struct{}{}
	}
	j.watch[sub][w] = struct{}{}
	return w, nil
}

func (j *journal) unregister(w *watcher) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.watch[w.sub], w)
	if len(j.watch[w.sub]) == 0 {
		delete(j.watch, w.sub)
	}
}

// follow reads the journal and hands each record to the watchers of its
// subscription.
func (j *journal) follow(ctx context.Context) {
	defer j.e.wg.Done()
	defer j.cl.Close()
	for {
		fs := j.cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			j.mu.Lock()
			j.err = ErrClosed
			for _, ws := range j.watch {
				for w := range ws {
					w.poke()
				}
			}
			j.mu.Unlock()
			j.prog.set(nil, ErrClosed)
			return
		}
		fs.EachError(func(topic string, p int32, err error) {
			j.e.cfg.Logger.Warn().Err(err).Str("topic", topic).Int32("partition", p).Msg("engine: journal fetch")
		})
		now := time.Now()
		next := map[int32]int64{}
		j.mu.Lock()
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			next[r.Partition] = r.Offset + 1
			var rec journalRecord
			if json.Unmarshal(r.Value, &rec) != nil {
				continue
			}
			j.dispatchLocked(string(r.Key), r.Offset, rec, now)
		}
		j.mu.Unlock()
		j.prog.set(next, nil)
	}
}

func (j *journal) dispatchLocked(key string, off int64, rec journalRecord, now time.Time) {
	if rec.T == jRenew {
		for sub, ep := range rec.Epochs {
			for w := range j.watch[sub] {
				if ep != w.epoch {
					w.renewed[ep] = now
					w.poke()
				}
			}
		}
		return
	}
	for w := range j.watch[key] {
		switch rec.T {
		case jClaim:
			ep := off + 1 // epochs start at 1: 0 is "none"
			w.maxClaim = max(w.maxClaim, ep)
			w.nodes[ep] = rec.Node
			if w.epoch != 0 && ep > w.epoch && w.stream != nil {
				w.stream.fence()
			}
		case jRelease:
			w.released[rec.Epoch] = true
		case jAcks:
			if w.stream != nil {
				w.stream.applyJournal(rec)
			} else if w.nbuf+len(rec.Acks)+len(rec.Rejects) <= maxBufferedAcks {
				w.buffered = append(w.buffered, rec)
				w.nbuf += len(rec.Acks) + len(rec.Rejects)
			}
		default:
			continue
		}
		w.poke()
	}
}

// renew writes, every LeaseRenew, one renewal per partition listing the
// epochs this node holds, and notes the success on their watchers.
func (j *journal) renew(ctx context.Context) {
	defer j.e.wg.Done()
	tk := time.NewTicker(LeaseRenew)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		byPart := map[int32]map[string]int64{}
		var held []*watcher
		j.mu.Lock()
		for sub, ws := range j.watch {
			for w := range ws {
				if w.stream != nil && w.epoch != 0 {
					p := j.partition(sub)
					if byPart[p] == nil {
						byPart[p] = map[string]int64{}
					}
					byPart[p][sub] = w.epoch
					held = append(held, w)
				}
			}
		}
		j.mu.Unlock()
		if len(held) == 0 {
			continue
		}
		sent := time.Now()
		ok := true
		for p, eps := range byPart {
			rctx, cancel := context.WithTimeout(ctx, LeaseRenew)
			_, err := j.produce(rctx, j.e.node, p, journalRecord{T: jRenew, Node: j.e.node, Epochs: eps})
			cancel()
			if err != nil {
				ok = false
				if ctx.Err() == nil {
					j.e.cfg.Logger.Warn().Err(err).Str("topic", j.topic).Msg("engine: lease renewal")
				}
			}
		}
		if ok {
			j.mu.Lock()
			for _, w := range held {
				w.renewOK = sent
			}
			j.mu.Unlock()
		}
	}
}

// attach hands the claimant's watcher its stream: buffered acks are
// applied, and a claim newer than ours fences it at once.
func (j *journal) attach(w *watcher, s *DurableStream) {
	j.mu.Lock()
	defer j.mu.Unlock()
	w.stream = s
	for _, rec := range w.buffered {
		s.applyJournal(rec)
	}
	w.buffered, w.nbuf = nil, 0
	if w.maxClaim > w.epoch {
		s.fence()
	}
}

// JournalAcks makes acknowledgements and rejections of a subscription
// durable in its tenant's journal (acks=all) before returning: whichever
// node holds the stream, now or later, applies them.
func (e *Engine) JournalAcks(ctx context.Context, t tenant.Tenant, sub string, acks []string, rejects []Rejection, rejectIDs []string) error {
	if len(acks) == 0 && len(rejectIDs) == 0 {
		return nil
	}
	j, err := e.journalFor(ctx, t)
	if err != nil {
		return err
	}
	rec := journalRecord{T: jAcks, Node: e.node, Acks: acks}
	for i, id := range rejectIDs {
		rec.Rejects = append(rec.Rejects, journalRejection{ID: id, Code: rejects[i].Code, Message: rejects[i].Message})
	}
	_, err = j.produce(ctx, sub, j.partition(sub), rec)
	return err
}
