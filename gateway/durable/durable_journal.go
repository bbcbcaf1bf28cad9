package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	Retry   bool   `json:"y,omitempty"` // retryable: redeliver, not final (absent in records before it existed: final)
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
// node: claims (fencing), releases of older epochs, acks.
type watcher struct {
	sub      string
	epoch    int64 // our claim; 0 until it is written
	maxClaim int64 // the newest claim seen (any node)
	released map[int64]bool
	// lease is the monotonic instant (monoNow) until which the holder may
	// hand out deliveries: LeaseHold past the start of its last renewal
	// that counted (docs/durable-cluster.md, "Leases")
	lease    atomic.Int64
	buffered []journalRecord // acks before the stream attached
	nbuf     int
	stream   *DurableStream
	notify   chan struct{}
}

// monoBase anchors monoNow: lease instants are read on the monotonic
// clock, which a wall-clock step does not move.
var monoBase = time.Now()

func monoNow() int64 { return int64(time.Since(monoBase)) }

// extend lets the holder deliver until LeaseHold after from (the moment
// before a journal write of ours that the cluster saw before any newer
// claim). The lease never moves back.
func (w *watcher) extend(from time.Time) {
	until := int64(from.Sub(monoBase) + LeaseHold)
	for {
		cur := w.lease.Load()
		if cur >= until || w.lease.CompareAndSwap(cur, until) {
			return
		}
	}
}

// holds says whether the holder's lease still runs.
func (w *watcher) holds() bool { return monoNow() < w.lease.Load() }

func (w *watcher) poke() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// journal is this node's follower of one tenant's journal topic.
type journal struct {
	e      *Cluster
	tenant string
	topic  string
	parts  int32
	cl     *kgo.Client
	cancel context.CancelFunc // stops follow and renew (retire, Cluster.Close)
	done   chan struct{}      // closed when both have returned

	prog *readProgress

	// startAt is when the end offsets the follower starts from were
	// listed: every record below them was appended before it
	startAt time.Time
	// lastUse (monoNow) is when journalFor last handed the journal out;
	// guarded by Cluster.jmu
	lastUse int64

	mu    sync.Mutex
	watch map[string]map[*watcher]struct{} // by subscription id
	lives map[string]*subLife              // by subscription id, at most maxLives
	// quietFloor is the latest sighting of what was forgotten with a
	// subLife dropped for room: no forgotten sign of life is later
	quietFloor time.Time
	err        error // the follower stopped
}

// JournalTopic is the tenant's subscription journal.
func (e *Cluster) JournalTopic(t tenant.Tenant) string {
	return e.cfg.Naming.Events(t.String()) + ".subjournal"
}

// journalSetup is one tenant's journal being set up (or set up: j): its
// own goroutine sets it up off Cluster.jmu, callers wait for ready.
type journalSetup struct {
	ready chan struct{}
	j     *journal
	err   error
}

// JournalSetupTimeout bounds the setup of a tenant's journal (topic
// creation, end offsets, client), whoever waits for it.
const JournalSetupTimeout = 30 * time.Second

// journalFor returns the tenant's journal follower, creating the topic and
// starting the follower on first use. The setup (CreateTopic, ListOffsets,
// the client) runs off Cluster.jmu on a goroutine of its own: a slow tenant
// holds up only its own callers, and a caller that gives up (ctx) does not
// fail the others.
func (e *Cluster) journalFor(ctx context.Context, t tenant.Tenant) (*journal, error) {
	key := t.String()
	e.jmu.Lock()
	js := e.journals[key]
	if js == nil {
		if !e.startGoroutines(1) {
			e.jmu.Unlock()
			return nil, ErrClosed
		}
		js = &journalSetup{ready: make(chan struct{})}
		e.journals[key] = js
		go e.setupJournal(js, key, e.JournalTopic(t))
	}
	select {
	case <-js.ready:
		if js.err == nil {
			js.j.lastUse = monoNow()
		}
		e.jmu.Unlock()
		return js.j, js.err
	default:
	}
	e.jmu.Unlock()
	select {
	case <-js.ready:
		if js.err == nil {
			e.jmu.Lock()
			js.j.lastUse = monoNow()
			e.jmu.Unlock()
		}
		return js.j, js.err
	case <-ctx.Done():
		return nil, fmt.Errorf("durable: journal of %s: %w", key, ctx.Err())
	}
}

// setupJournal sets js up; a failed setup is forgotten (the next caller
// tries again).
func (e *Cluster) setupJournal(js *journalSetup, key, topic string) {
	defer e.wg.Done()
	ctx, cancel := context.WithTimeout(e.ctx, JournalSetupTimeout)
	j, err := e.startJournal(ctx, key, topic)
	cancel()
	e.jmu.Lock()
	js.j, js.err = j, err
	if err != nil {
		delete(e.journals, key)
	} else {
		j.lastUse = monoNow()
	}
	e.jmu.Unlock()
	close(js.ready)
}

// startJournal creates the journal topic unless it exists, lists its end
// offsets and starts the follower (and renewals) there.
func (e *Cluster) startJournal(ctx context.Context, key, topic string) (*journal, error) {
	if err := e.createJournal(ctx, topic); err != nil {
		return nil, err
	}
	ends, err := e.endOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	startAt := time.Now()
	offs := map[int32]kgo.Offset{}
	start := map[int32]int64{}
	var parts int32
	ends.Each(func(lo kadm.ListedOffset) {
		offs[lo.Partition] = kgo.NewOffset().At(lo.Offset)
		start[lo.Partition] = lo.Offset
		parts = max(parts, lo.Partition+1)
	})
	if parts == 0 {
		return nil, fmt.Errorf("durable: %s has no partitions", topic)
	}
	j := &journal{
		e: e, tenant: key, topic: topic, parts: parts, startAt: startAt, done: make(chan struct{}),
		watch: map[string]map[*watcher]struct{}{}, lives: map[string]*subLife{}, prog: newReadProgress(),
	}
	j.prog.set(start, nil)
	opts := append(append([]kgo.Opt(nil), e.cfg.ClientOpts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offs}),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.FetchMaxWait(time.Second),
	)
	if j.cl, err = kgo.NewClient(opts...); err != nil {
		return nil, fmt.Errorf("durable: journal client: %w", err)
	}
	if !e.startGoroutines(1) {
		j.cl.Close()
		return nil, ErrClosed
	}
	var jctx context.Context
	jctx, j.cancel = context.WithCancel(e.ctx)
	go j.run(jctx)
	return j, nil
}

// run follows the journal and renews this node's leases until ctx ends
// (the engine closes or the journal is retired), then closes the client.
func (j *journal) run(ctx context.Context) {
	defer j.e.wg.Done()
	defer close(j.done)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		j.renew(ctx)
	}()
	j.follow(ctx)
	j.cancel() // the follower stopped by itself: renewals are pointless
	wg.Wait()
	j.cl.Close()
}

// createJournal creates the journal topic (one partition, delete policy,
// JournalRetention) unless it exists.
func (e *Cluster) createJournal(ctx context.Context, topic string) error {
	ret := fmt.Sprint(JournalRetention.Milliseconds())
	cfg := map[string]*string{"cleanup.policy": ptr("delete"), "retention.ms": &ret}
	resp, err := e.adm.CreateTopic(ctx, 1, e.cfg.ReplicationFactor, cfg, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("durable: create topic %s: %w", topic, partitioning.ExplainCreate(err, e.cfg.ReplicationFactor))
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
		return 0, fmt.Errorf("durable: journal %s: %w", rec.T, err)
	}
	return r.Offset, nil
}

// register starts following sub for a claimant.
func (j *journal) register(sub string) (*watcher, error) {
	w := &watcher{sub: sub, released: map[int64]bool{}, notify: make(chan struct{}, 1)}
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
// subscription. A record that does not parse is skipped, logged and
// counted; a fetch error is logged and counted (the client retries it).
func (j *journal) follow(ctx context.Context) {
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
			j.e.metrics.journalFetchError("follow")
			j.e.cfg.Logger.Warn().Err(err).Str("topic", topic).Int32("partition", p).Msg("durable: journal fetch")
		})
		now := time.Now()
		next := map[int32]int64{}
		j.mu.Lock()
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			next[r.Partition] = r.Offset + 1
			rec, ok := j.parse(r)
			if !ok {
				continue
			}
			j.dispatchLocked(string(r.Key), r.Offset, rec, now)
		}
		j.mu.Unlock()
		j.prog.set(next, nil)
	}
}

// parse decodes a journal record; one that does not parse is logged and
// counted (aep_durable_journal_skipped_records_total) and skipped.
func (j *journal) parse(r *kgo.Record) (journalRecord, bool) {
	var rec journalRecord
	if err := json.Unmarshal(r.Value, &rec); err != nil {
		j.e.metrics.journalSkipped("journal")
		j.e.cfg.Logger.Warn().Err(err).Str("topic", r.Topic).Int32("partition", r.Partition).Int64("offset", r.Offset).
			Msg("durable: unreadable journal record skipped")
		return rec, false
	}
	return rec, true
}

func (j *journal) dispatchLocked(key string, off int64, rec journalRecord, now time.Time) {
	if rec.T == jRenew {
		for sub, ep := range rec.Epochs {
			j.lifeLocked(sub, now).sign(ep, now)
		}
		return
	}
	l := j.lifeLocked(key, now)
	switch rec.T {
	case jClaim:
		l.claim(off+1, now, rec.Node)
	case jCkpt, jDeliver:
		l.sign(rec.Epoch, now)
	}
	for w := range j.watch[key] {
		switch rec.T {
		case jClaim:
			ep := off + 1 // epochs start at 1: 0 is "none"
			w.maxClaim = max(w.maxClaim, ep)
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
// epochs this node holds. A renewal counts (extends the leases from the
// moment it was sent) only once the follower has read past it and found
// no newer claim of the subscription before it: every renewal that counts
// precedes, in the journal, the first claim newer than its epoch. That is
// what lets a claimant bound the holder's lease (awaitRelease).
func (j *journal) renew(ctx context.Context) {
	tk := time.NewTicker(LeaseRenew)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		if j.retireIfIdle() {
			return
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
		if err := j.renewOnce(ctx, byPart); err != nil {
			if ctx.Err() == nil {
				j.e.cfg.Logger.Warn().Err(err).Str("topic", j.topic).Msg("durable: lease renewal")
			}
			continue
		}
		j.mu.Lock()
		for _, w := range held {
			if w.maxClaim <= w.epoch {
				w.extend(sent)
			}
		}
		j.mu.Unlock()
	}
}

// renewOnce writes the renewals and waits (at most LeaseRenew) until the
// follower has read past them.
func (j *journal) renewOnce(ctx context.Context, byPart map[int32]map[string]int64) error {
	rctx, cancel := context.WithTimeout(ctx, LeaseRenew)
	defer cancel()
	offs := make(map[int32]int64, len(byPart))
	for p, eps := range byPart {
		off, err := j.produce(rctx, j.e.node, p, journalRecord{T: jRenew, Node: j.e.node, Epochs: eps})
		if err != nil {
			return err
		}
		offs[p] = off
	}
	for p, off := range offs {
		if err := j.prog.waitPast(rctx, p, off+1); err != nil {
			return fmt.Errorf("durable: journal %s: renewal not read back: %w", j.topic, err)
		}
	}
	return nil
}

// JournalIdle is how long a tenant's journal follower stays without a
// stream, a claim or an ack on this node before it is closed (the next
// use starts it again, from the journal's end then).
var JournalIdle = 5 * time.Minute

// retireIfIdle closes the journal when nothing watches it and journalFor
// has not handed it out for JournalIdle; the next journalFor starts a new
// one. A caller holding the retired journal gets ErrClosed from it.
func (j *journal) retireIfIdle() bool {
	e := j.e
	e.jmu.Lock()
	defer e.jmu.Unlock()
	if time.Duration(monoNow()-j.lastUse) < JournalIdle {
		return false
	}
	j.mu.Lock()
	idle := len(j.watch) == 0
	if idle {
		j.err = ErrClosed
	}
	j.mu.Unlock()
	if !idle {
		return false
	}
	if js := e.journals[j.tenant]; js != nil && js.j == j {
		delete(e.journals, j.tenant)
	}
	j.cancel()
	return true
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
func (e *Cluster) JournalAcks(ctx context.Context, t tenant.Tenant, sub string, acks []string, rejects []Rejection, rejectIDs []string) error {
	if len(acks) == 0 && len(rejectIDs) == 0 {
		return nil
	}
	j, err := e.journalFor(ctx, t)
	if err != nil {
		return err
	}
	rec := journalRecord{T: jAcks, Node: e.node, Acks: acks}
	for i, id := range rejectIDs {
		rec.Rejects = append(rec.Rejects, journalRejection{ID: id, Code: rejects[i].Code, Message: rejects[i].Message, Retry: rejects[i].Retryable})
	}
	_, err = j.produce(ctx, sub, j.partition(sub), rec)
	return err
}

// journalMetrics count what the followers of the journal and of the
// subscriptions topic could not use: nothing is skipped without a trace.
type journalMetrics struct {
	skipped     *prometheus.CounterVec // log: records that did not parse
	fetchErrors *prometheus.CounterVec // reader: fetch errors seen
}

func newJournalMetrics(reg prometheus.Registerer) *journalMetrics {
	m := &journalMetrics{
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aep_durable_journal_skipped_records_total",
			Help: "Records of the subscription journal (log=journal) or of the subscriptions topic (log=subscriptions) skipped because they did not parse; each one is logged."}, []string{"log"}),
		fetchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aep_durable_journal_fetch_errors_total",
			Help: "Fetch errors reading the subscription journal, by reader: follow (the node's follower, retried), replay (a takeover's fold, which then fails)."}, []string{"reader"}),
	}
	if reg != nil {
		reg.MustRegister(m.skipped, m.fetchErrors)
	}
	return m
}

func (m *metrics) journalSkipped(log string)      { m.journal.skipped.WithLabelValues(log).Inc() }
func (m *metrics) journalFetchError(where string) { m.journal.fetchErrors.WithLabelValues(where).Inc() }
