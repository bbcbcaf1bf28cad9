// Package filterworker is the filter worker of the workers live-delivery
// mode (docs/scaling.md, package gateway/forward): a member of a Kafka
// consumer group over every tenant events topic that evaluates the
// registered live subscriptions' filters on each record's routing headers
// and forwards each matching record once per node holding a matching
// subscription to that node's partition of the delivery topic.
//
// Order and loss: the worker processes one poll at a time; it produces the
// batch's forwards (acks=all, idempotent: Kafka keeps their order per
// delivery partition), waits for every acknowledgement, and only then
// commits the batch's source offsets. A worker that dies is replaced by the
// group's rebalance from the committed offsets; what it had forwarded past
// them is forwarded again and dropped by the node (by source offset).
//
// Registration: the worker reads the whole registry topic before it joins
// the group, then follows it. A new subscription is answered with a marker
// per source partition the worker owns, carrying its position there: every
// record from that offset on is evaluated with the subscription. On each
// assignment the worker sends a marker per owned partition for every
// registered subscription of that tenant, so a subscription whose marker was
// lost with a dead worker still gets one.
//
// Concurrency: Run owns every goroutine it starts (the registry follower,
// the lease sweeper) and waits for them before it returns. The state below
// is guarded by Worker.mu; the forward loop holds it while it evaluates a
// whole poll, the registry follower for one record, so a marker is queued
// either before or after all of a poll's forwards, never between them.
// Records are queued under Worker.mu and produced in queue order with no
// lock held (send): Produce blocks while the client's buffer is full, and
// the buffer frees only as produce callbacks return, so the callbacks take
// no lock and never block. Whoever queues waits until its records are
// handed to the client, which bounds the queue to one poll's forwards plus
// one registry record's, assignment's or sweep's records per goroutine.
package filterworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/forward"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// Defaults for zero Config fields.
const (
	DefaultGroup          = "aep-filter-workers"
	DefaultMetadataMaxAge = 10 * time.Second
	DefaultSweepInterval  = 5 * time.Second
	// DefaultSessionTimeout is how long the group waits for a worker that
	// stopped answering before its partitions go to the others.
	DefaultSessionTimeout = 10 * time.Second
)

// Config configures a Worker. Zero fields mean the documented defaults.
type Config struct {
	// ClientOpts connect the worker's Kafka clients (seed brokers, TLS,
	// SASL). Required.
	ClientOpts []kgo.Opt
	// Naming derives the tenant topics, which the worker finds by a regular
	// expression made from its template.
	Naming partitioning.Naming
	// RegistryTopic and DeliveryTopic default to forward's defaults; the
	// nodes must use the same.
	RegistryTopic, DeliveryTopic string
	// Group is the consumer group of the workers. Zero means DefaultGroup.
	Group string
	// MetadataMaxAge bounds how long a new tenant topic goes unread.
	// Zero means DefaultMetadataMaxAge.
	MetadataMaxAge time.Duration
	// SessionTimeout is the group session timeout: how long a dead
	// worker's partitions go unread. Zero means DefaultSessionTimeout.
	SessionTimeout time.Duration
	// SweepInterval is how often expired leases are looked for. Zero means
	// DefaultSweepInterval.
	SweepInterval time.Duration
	// Ensure, when set, provisions the registry and delivery topics
	// before Run reads them (forward.Topics.Ensure).
	Ensure func(context.Context) error
	Logger zerolog.Logger
	// Registerer receives the worker's metrics (aep_filterworker_*). Nil
	// leaves them unregistered.
	Registerer prometheus.Registerer
}

// Worker forwards matching records to nodes. Run it once.
type Worker struct {
	cfg     Config
	re      *regexp.Regexp
	metrics metrics

	// produceErr is the first failed forward or marker; set by the
	// produce callbacks, which take no lock.
	produceErr atomic.Pointer[error]
	onProduced func(*kgo.Record, error) // w.produced, bound once (a method value per Produce allocates)

	mu      sync.Mutex
	prod    *kgo.Client                // set by Run before any goroutine uses it
	nparts  int32                      // partitions of the delivery topic
	regN    int32                      // partitions of the registry topic
	subs    map[string]*entry          // by registry key
	tenants map[string]*tenantSubs     // by tenant
	leases  map[string]lease           // by node
	owned   map[string]map[int32]int64 // source topic → partition → next offset to process
	// starts are assigned partitions the group had no committed offset
	// for, at the end they started from: the forward loop commits them
	// before it forwards from them (commitStarts).
	starts map[string]map[int32]int64
	nextID filtering.ID                //
	groups map[forward.Target][]uint64 // scratch of the forward loop
	order  []forward.Target            // scratch of the forward loop
	ids    []filtering.ID              // scratch of the forward loop
	attrs  aep.Attrs                   // scratch of the forward loop
	out    outbox
}

// outbox holds the records queued under Worker.mu until one goroutine at a
// time produces them, in order, with no lock held (Worker.send).
type outbox struct {
	recs     []*kgo.Record
	spare    []*kgo.Record // the last batch's slice, cleared, for reuse
	queued   uint64        // records ever queued
	sent     uint64        // records ever handed to the producer
	sending  bool          // a goroutine is producing a taken batch
	progress *sync.Cond    // on Worker.mu: sent moved or sending ended
}

type entry struct {
	key    string
	sub    forward.Sub
	wid    filtering.ID
	target forward.Target
}

type tenantSubs struct {
	index *filtering.Index
	byID  map[filtering.ID]*entry
}

type lease struct {
	inc     string
	expires time.Time
}

type metrics struct {
	read, forwarded, markers prometheus.Counter
	subscriptions            prometheus.Gauge
}

// New validates cfg and returns a Worker.
func New(cfg Config) (*Worker, error) {
	if len(cfg.ClientOpts) == 0 {
		return nil, errors.New("filterworker: Config.ClientOpts must name the brokers")
	}
	if err := cfg.Naming.Validate(); err != nil {
		return nil, err
	}
	if cfg.RegistryTopic == "" {
		cfg.RegistryTopic = forward.DefaultRegistryTopic
	}
	if cfg.DeliveryTopic == "" {
		cfg.DeliveryTopic = forward.DefaultDeliveryTopic
	}
	if cfg.Group == "" {
		cfg.Group = DefaultGroup
	}
	if cfg.MetadataMaxAge <= 0 {
		cfg.MetadataMaxAge = DefaultMetadataMaxAge
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	w := &Worker{
		cfg: cfg, re: TopicRegexp(cfg.Naming),
		subs: map[string]*entry{}, tenants: map[string]*tenantSubs{}, leases: map[string]lease{},
		owned: map[string]map[int32]int64{}, groups: map[forward.Target][]uint64{}, starts: map[string]map[int32]int64{},
		metrics: metrics{
			read:          prometheus.NewCounter(prometheus.CounterOpts{Name: "aep_filterworker_records_total", Help: "Source records the worker evaluated."}),
			forwarded:     prometheus.NewCounter(prometheus.CounterOpts{Name: "aep_filterworker_forwarded_total", Help: "Records forwarded to nodes (one per node a record matched on)."}),
			markers:       prometheus.NewCounter(prometheus.CounterOpts{Name: "aep_filterworker_markers_total", Help: "Registration markers sent to nodes."}),
			subscriptions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "aep_filterworker_subscriptions", Help: "Live subscriptions registered."}),
		},
	}
	w.out.progress = sync.NewCond(&w.mu)
	w.onProduced = w.produced
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(w.metrics.read, w.metrics.forwarded, w.metrics.markers, w.metrics.subscriptions)
	}
	return w, nil
}

// TopicRegexp matches the events topics of n and captures the tenant.
func TopicRegexp(n partitioning.Naming) *regexp.Regexp {
	before, after, _ := strings.Cut(n.Events("{tenant}"), "{tenant}")
	return regexp.MustCompile("^" + regexp.QuoteMeta(before) + "([a-zA-Z0-9_-]{1,64})" + regexp.QuoteMeta(after) + "$")
}

// tenantOf is the tenant of a source topic, or "".
func (w *Worker) tenantOf(topic string) string {
	m := w.re.FindStringSubmatch(topic)
	if m == nil {
		return ""
	}
	return m[1]
}

// Run loads the registry, joins the group and forwards until ctx ends
// (nil, also when it ends while Run is still starting) or a forward fails
// (the error; the caller should exit, and the group hands the partitions
// to the other workers from the committed offsets). It waits for every
// goroutine it started.
func (w *Worker) Run(ctx context.Context) error {
	err := w.run(ctx)
	if ctx.Err() != nil {
		return nil //nolint:nilerr // stopped by its owner: documented above
	}
	return err
}

func (w *Worker) run(ctx context.Context) error {
	if w.cfg.Ensure != nil {
		if err := w.cfg.Ensure(ctx); err != nil {
			return fmt.Errorf("filterworker: %w", err)
		}
	}
	prod, err := kgo.NewClient(append(append([]kgo.Opt(nil), w.cfg.ClientOpts...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0))...) // Flush after every poll: lingering only adds latency
	if err != nil {
		return fmt.Errorf("filterworker: producer: %w", err)
	}
	defer prod.Close()
	adm := kadm.NewClient(prod)
	n, err := partitionsOf(ctx, adm, w.cfg.DeliveryTopic)
	if err != nil {
		return err
	}
	regParts, err := adm.ListEndOffsets(ctx, w.cfg.RegistryTopic)
	if err == nil {
		err = regParts.Error()
	}
	if err != nil {
		return fmt.Errorf("filterworker: registry topic %s: %w", w.cfg.RegistryTopic, err)
	}
	w.mu.Lock()
	w.prod, w.nparts, w.regN = prod, n, int32(len(regParts[w.cfg.RegistryTopic]))
	w.mu.Unlock()

	reg, err := kgo.NewClient(append(append([]kgo.Opt(nil), w.cfg.ClientOpts...),
		kgo.ConsumeTopics(w.cfg.RegistryTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return fmt.Errorf("filterworker: registry reader: %w", err)
	}
	defer reg.Close()
	if err := w.loadRegistry(ctx, reg, regParts); err != nil {
		return err
	}
	w.sweep(ctx, time.Now())

	src, err := kgo.NewClient(append(append([]kgo.Opt(nil), w.cfg.ClientOpts...),
		kgo.ConsumeRegex(), kgo.ConsumeTopics(w.re.String()), kgo.ConsumerGroup(w.cfg.Group),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(), kgo.MetadataMaxAge(w.cfg.MetadataMaxAge), kgo.MetadataMinAge(min(w.cfg.MetadataMaxAge, 5*time.Second)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()), kgo.SessionTimeout(w.cfg.SessionTimeout),
		kgo.AdjustFetchOffsetsFn(func(actx context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
			return w.assigned(actx, ctx, adm, offs)
		}),
		kgo.OnPartitionsRevoked(w.revoked), kgo.OnPartitionsLost(w.revoked))...)
	if err != nil {
		return fmt.Errorf("filterworker: source consumer: %w", err)
	}
	defer src.Close() // leaves the group: the others take the partitions at once

	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.followRegistry(fctx, reg) }()
	go func() { defer wg.Done(); w.sweeper(fctx) }()
	err = w.forwardLoop(ctx, src)
	cancel()
	wg.Wait()
	return err
}

func partitionsOf(ctx context.Context, adm *kadm.Client, topic string) (int32, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("filterworker: delivery topic %s: %w", topic, err)
	}
	n := int32(len(ends[topic]))
	if n == 0 {
		return 0, fmt.Errorf("filterworker: delivery topic %s has no partitions (is it provisioned?)", topic)
	}
	return n, nil
}

// forwardLoop polls, forwards, waits for the acknowledgements and commits,
// one poll at a time.
func (w *Worker) forwardLoop(ctx context.Context, src *kgo.Client) error {
	defer src.AllowRebalance() // Close's LeaveGroup waits for it
	for {
		fs := src.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return nil
		}
		fs.EachError(func(topic string, p int32, err error) {
			w.cfg.Logger.Warn().Err(err).Str("topic", topic).Int32("partition", p).Msg("filterworker: fetch")
		})
		w.commitStarts(ctx, src)
		w.mu.Lock()
		fs.EachRecord(w.forwardLocked)
		w.sendLocked(ctx)
		w.mu.Unlock()
		w.cfg.Logger.Debug().Int("records", fs.NumRecords()).Msg("filterworker: poll")
		if err := w.prod.Flush(ctx); err != nil {
			return nil // ctx ended: the next owner forwards again from the commit
		}
		if ctx.Err() != nil {
			return nil // forwards failed by the cancellation are forwarded again by the next owner
		}
		if err := w.produceErr.Load(); err != nil {
			return *err
		}
		// Every forward of the poll is acknowledged: commit, without waiting
		// (a commit lost to a rebalance only means the next owner forwards
		// again what the nodes then drop as copies).
		src.CommitOffsets(ctx, src.UncommittedOffsets(), func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
			if err != nil && ctx.Err() == nil {
				w.cfg.Logger.Warn().Err(err).Msg("filterworker: commit")
			}
		})
		src.AllowRebalance()
	}
}

// commitStarts commits, and waits for, the start of every assigned
// partition the group had no committed offset for, before anything is
// forwarded from it. Without it, a worker that died before its first
// commit left none, and its replacement started at the end then: what
// was published in between was never forwarded. A failed commit is
// logged (the forward goes ahead: no worse than before).
func (w *Worker) commitStarts(ctx context.Context, src *kgo.Client) {
	w.mu.Lock()
	if len(w.starts) == 0 {
		w.mu.Unlock()
		return
	}
	offs := make(map[string]map[int32]kgo.EpochOffset, len(w.starts))
	for topic, parts := range w.starts {
		offs[topic] = make(map[int32]kgo.EpochOffset, len(parts))
		for p, o := range parts {
			offs[topic][p] = kgo.EpochOffset{Epoch: -1, Offset: o}
		}
	}
	clear(w.starts)
	w.mu.Unlock()
	src.CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err == nil {
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil && err == nil {
						err = fmt.Errorf("%s[%d]: %w", t.Topic, p.Partition, perr)
					}
				}
			}
		}
		if err != nil && ctx.Err() == nil {
			w.cfg.Logger.Warn().Err(err).Msg("filterworker: commit of the start offsets")
		}
	})
}

// forwardLocked evaluates one source record and produces it once per node
// incarnation that holds a match. Must hold w.mu.
func (w *Worker) forwardLocked(r *kgo.Record) {
	w.metrics.read.Inc()
	if parts := w.owned[r.Topic]; parts != nil {
		parts[r.Partition] = r.Offset + 1
	}
	ts := w.tenants[w.tenantOf(r.Topic)]
	if ts == nil || ts.index.Len() == 0 {
		return
	}
	if partitioning.DecodeHeaders(r.Headers, &w.attrs) != nil {
		return
	}
	w.ids = ts.index.Match(&w.attrs, w.ids[:0])
	if len(w.ids) == 0 {
		return
	}
	w.order = w.order[:0]
	for _, id := range w.ids {
		e := ts.byID[id]
		if e == nil {
			continue
		}
		if _, ok := w.groups[e.target]; !ok {
			w.order = append(w.order, e.target)
		}
		w.groups[e.target] = append(w.groups[e.target], e.sub.ID)
	}
	for _, to := range w.order {
		hs := make([]kgo.RecordHeader, 0, len(r.Headers)+6)
		hs = forward.AppendHeaders(append(hs, r.Headers...), to, r.Topic, r.Partition, r.Offset, r.Key, w.groups[to], false)
		w.queueLocked(&kgo.Record{Topic: w.cfg.DeliveryTopic, Partition: to.Partition, Key: []byte(to.Node),
			Value: r.Value, Headers: hs, Timestamp: r.Timestamp})
		w.metrics.forwarded.Inc()
		delete(w.groups, to)
	}
}

// queueLocked queues r for the next send. Must hold w.mu.
func (w *Worker) queueLocked(r *kgo.Record) {
	w.out.recs = append(w.out.recs, r)
	w.out.queued++
}

// sendLocked returns once every record queued so far is handed to the
// producer, in queue order, or once ctx ends. It produces them itself
// unless another goroutine is producing a batch, and never holds w.mu
// while it calls Produce (which blocks while the producer's buffer is
// full, until ctx ends). Must hold w.mu; releases it meanwhile.
func (w *Worker) sendLocked(ctx context.Context) {
	o := &w.out
	for target := o.queued; o.sent < target && ctx.Err() == nil; {
		if o.sending {
			// Woken by the sender, or by ctx's end: a sender stuck on a
			// broker that does not answer must not hold up shutdown.
			stop := context.AfterFunc(ctx, func() {
				w.mu.Lock()
				defer w.mu.Unlock()
				o.progress.Broadcast()
			})
			o.progress.Wait()
			stop()
			continue
		}
		batch := o.recs
		o.recs, o.spare, o.sending = o.spare, nil, true
		w.mu.Unlock()
		for _, r := range batch {
			w.prod.Produce(ctx, r, w.onProduced)
		}
		w.mu.Lock()
		o.sent += uint64(len(batch))
		clear(batch)
		o.spare, o.sending = batch[:0], false
		o.progress.Broadcast()
	}
}

// produced is the callback of every produced record: it keeps the first
// failure for the forward loop, which stops before committing. It takes no
// lock: franz-go runs callbacks one at a time and frees buffer space only
// after each returns.
func (w *Worker) produced(r *kgo.Record, err error) {
	if err == nil {
		return
	}
	if r.Topic == w.cfg.RegistryTopic {
		// A sweep's tombstone: every worker writes them, the next sweep
		// again; losing one costs nothing.
		w.cfg.Logger.Warn().Err(err).Str("key", string(r.Key)).Msg("filterworker: registry tombstone")
		return
	}
	err = fmt.Errorf("filterworker: forward to %s[%d]: %w", r.Topic, r.Partition, err)
	w.produceErr.CompareAndSwap(nil, &err)
}

// markLocked tells the node of target that the listed subscriptions are
// evaluated from offset on in topic's partition p. Must hold w.mu.
func (w *Worker) markLocked(to forward.Target, topic string, p int32, offset int64, ids []uint64) {
	hs := forward.AppendHeaders(nil, to, topic, p, offset, nil, ids, true)
	w.queueLocked(&kgo.Record{Topic: w.cfg.DeliveryTopic, Partition: to.Partition, Key: []byte(to.Node), Headers: hs})
	w.metrics.markers.Inc()
}

// assigned resolves the start offset of every newly assigned partition
// (the committed offset, or the end now when there is none), records it
// as the partition's position and sends the markers of every registered
// subscription of its tenant. ctx bounds the listing; the markers go out
// with sendCtx, Run's: a sender may carry other goroutines' records (a
// poll's forwards), which must not fail because a rebalance ended.
func (w *Worker) assigned(ctx, sendCtx context.Context, adm *kadm.Client, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	var unresolved []string
	for topic, parts := range offs {
		for _, o := range parts {
			if o.EpochOffset().Offset < 0 {
				unresolved = append(unresolved, topic)
				break
			}
		}
	}
	if len(unresolved) > 0 {
		ends, err := adm.ListEndOffsets(ctx, unresolved...)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("filterworker: end offsets: %w", err)
		}
		for topic, parts := range offs {
			for p, o := range parts {
				if o.EpochOffset().Offset >= 0 {
					continue
				}
				lo, ok := ends.Lookup(topic, p)
				if !ok {
					return nil, fmt.Errorf("filterworker: no end offset for %s[%d]", topic, p)
				}
				parts[p] = kgo.NewOffset().At(lo.Offset).WithEpoch(-1)
				w.mu.Lock()
				if w.starts[topic] == nil {
					w.starts[topic] = map[int32]int64{}
				}
				w.starts[topic][p] = lo.Offset
				w.mu.Unlock()
			}
		}
	}
	w.cfg.Logger.Info().Interface("partitions", offs).Msg("filterworker: assigned")
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.sendLocked(sendCtx)
	for topic, parts := range offs {
		if w.owned[topic] == nil {
			w.owned[topic] = map[int32]int64{}
		}
		ts := w.tenants[w.tenantOf(topic)]
		for p, o := range parts {
			pos := o.EpochOffset().Offset
			w.owned[topic][p] = pos
			if ts == nil {
				continue
			}
			for _, to := range w.targetsLocked(ts) {
				w.markLocked(to, topic, p, pos, w.groups[to])
				delete(w.groups, to)
			}
		}
	}
	return offs, nil
}

// targetsLocked groups ts's subscriptions by node incarnation into
// w.groups and returns the targets. Must hold w.mu.
func (w *Worker) targetsLocked(ts *tenantSubs) []forward.Target {
	w.order = w.order[:0]
	for _, e := range ts.byID {
		if _, ok := w.groups[e.target]; !ok {
			w.order = append(w.order, e.target)
		}
		w.groups[e.target] = append(w.groups[e.target], e.sub.ID)
	}
	return w.order
}

func (w *Worker) revoked(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	if len(lost) > 0 {
		w.cfg.Logger.Info().Interface("partitions", lost).Msg("filterworker: revoked")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for topic, parts := range lost {
		for _, p := range parts {
			delete(w.owned[topic], p)
			delete(w.starts[topic], p)
		}
		if len(w.starts[topic]) == 0 {
			delete(w.starts, topic)
		}
		if len(w.owned[topic]) == 0 {
			delete(w.owned, topic)
		}
	}
}

// loadRegistry reads the registry up to the ends listed before.
func (w *Worker) loadRegistry(ctx context.Context, reg *kgo.Client, ends kadm.ListedOffsets) error {
	left := map[int32]int64{}
	ends.Each(func(lo kadm.ListedOffset) {
		if lo.Offset > 0 {
			left[lo.Partition] = lo.Offset
		}
	})
	for len(left) > 0 {
		fs := reg.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		fs.EachError(func(topic string, p int32, err error) {
			w.cfg.Logger.Warn().Err(err).Str("topic", topic).Int32("partition", p).Msg("filterworker: registry fetch")
		})
		fs.EachRecord(func(r *kgo.Record) {
			w.apply(ctx, r, false)
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
	}
	return nil
}

func (w *Worker) followRegistry(ctx context.Context, reg *kgo.Client) {
	for {
		fs := reg.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachError(func(topic string, p int32, err error) {
			w.cfg.Logger.Warn().Err(err).Str("topic", topic).Int32("partition", p).Msg("filterworker: registry fetch")
		})
		fs.EachRecord(func(r *kgo.Record) { w.apply(ctx, r, true) })
	}
}

// apply applies one registry record; mark answers a new subscription with
// markers (not while loading: the assignments send them).
func (w *Worker) apply(ctx context.Context, r *kgo.Record, mark bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.applyLocked(r, mark)
	w.sendLocked(ctx)
}

// applyLocked applies r and queues its markers. Must hold w.mu.
func (w *Worker) applyLocked(r *kgo.Record, mark bool) {
	if node, ok := forward.IsLeaseKey(r.Key); ok {
		if r.Value == nil {
			delete(w.leases, node)
			w.dropLocked(func(e *entry) bool { return e.sub.Node == node })
			return
		}
		var l forward.Lease
		if err := json.Unmarshal(r.Value, &l); err != nil {
			w.cfg.Logger.Warn().Err(err).Str("key", string(r.Key)).Msg("filterworker: registry lease")
			return
		}
		w.leases[node] = lease{inc: l.Incarnation, expires: r.Timestamp.Add(time.Duration(l.TTLMillis) * time.Millisecond)}
		w.dropLocked(func(e *entry) bool { return e.sub.Node == node && e.sub.Incarnation != l.Incarnation })
		return
	}
	key := string(r.Key)
	if old := w.subs[key]; old != nil {
		w.removeLocked(old)
	}
	if r.Value == nil {
		return
	}
	var s forward.Sub
	if err := json.Unmarshal(r.Value, &s); err != nil {
		w.cfg.Logger.Warn().Err(err).Str("key", key).Msg("filterworker: registry entry")
		return
	}
	f, err := s.Compile()
	if err != nil {
		w.cfg.Logger.Warn().Err(err).Str("key", key).Msg("filterworker: registry filter")
		return
	}
	w.nextID++
	e := &entry{key: key, sub: s, wid: w.nextID,
		target: forward.Target{Node: s.Node, Incarnation: s.Incarnation, Partition: forward.Partition(s.Node, w.nparts)}}
	ts := w.tenants[s.Tenant]
	if ts == nil {
		ts = &tenantSubs{index: filtering.NewIndex(), byID: map[filtering.ID]*entry{}}
		w.tenants[s.Tenant] = ts
	}
	ts.index.Add(e.wid, f)
	ts.byID[e.wid] = e
	w.subs[key] = e
	w.metrics.subscriptions.Inc()
	if !mark {
		return
	}
	topic := w.cfg.Naming.Events(s.Tenant)
	for p, pos := range w.owned[topic] {
		w.markLocked(e.target, topic, p, pos, []uint64{s.ID})
	}
}

func (w *Worker) removeLocked(e *entry) {
	ts := w.tenants[e.sub.Tenant]
	ts.index.Remove(e.wid)
	delete(ts.byID, e.wid)
	if len(ts.byID) == 0 {
		delete(w.tenants, e.sub.Tenant)
	}
	delete(w.subs, e.key)
	w.metrics.subscriptions.Dec()
}

// dropLocked removes the subscriptions drop selects. Must hold w.mu.
func (w *Worker) dropLocked(drop func(*entry) bool) []string {
	var keys []string
	for _, e := range w.subs {
		if drop(e) {
			keys = append(keys, e.key)
			w.removeLocked(e)
		}
	}
	return keys
}

func (w *Worker) sweeper(ctx context.Context) {
	tick := time.NewTicker(w.cfg.SweepInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			w.sweep(ctx, now)
		}
	}
}

// sweep drops the subscriptions of nodes whose lease expired, was
// tombstoned or names another incarnation, and tombstones them in the
// registry (every worker does; the tombstones are idempotent).
func (w *Worker) sweep(ctx context.Context, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.sendLocked(ctx)
	keys := w.dropLocked(func(e *entry) bool {
		l, ok := w.leases[e.sub.Node]
		return !ok || l.inc != e.sub.Incarnation || now.After(l.expires)
	})
	for _, k := range keys {
		w.queueLocked(&kgo.Record{Topic: w.cfg.RegistryTopic, Partition: partitioning.Partition([]byte(k), w.regN), Key: []byte(k)})
	}
}
