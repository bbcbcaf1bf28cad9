package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/internal/membudget"
	"github.com/aep-gateway/aep-gateway/internal/pace"
	"github.com/aep-gateway/aep-gateway/internal/queue"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// Defaults for zero Config fields.
const (
	DefaultQueue    = 256
	DefaultMaxQueue = 1 << 16
	// DefaultReaderFetchBytes bounds one fetch of a subscription's own
	// reader (catch-up, durable stream), in bytes as stored (compressed).
	DefaultReaderFetchBytes = 256 << 10
	// DefaultPartitionCheck is how often a tail looks for partitions added
	// to its topic.
	DefaultPartitionCheck = 10 * time.Second
	// DefaultMemoryBudget and DefaultTenantMemoryBudget bound the decoded
	// event bytes that catching-up streams hold in their queues, on the
	// node and per tenant.
	DefaultMemoryBudget       = 256 << 20
	DefaultTenantMemoryBudget = 64 << 20
	// DefaultCatchUpRate and DefaultTenantCatchUpRate pace catch-ups
	// (bytes decoded per second, docs/security.md "Catch-up pacing").
	DefaultCatchUpRate       = 256 << 20
	DefaultTenantCatchUpRate = 64 << 20
)

var (
	// ErrClosed ends every subscription when the Engine closes.
	ErrClosed = errors.New("engine: engine closed")
	// ErrBadRequest wraps a Subscribe request that can never succeed.
	ErrBadRequest = errors.New("engine: bad subscribe request")
)

// TopicEnsurer finds, creating on first use, a tenant's events topic.
// *partitioning.Provisioner satisfies it.
type TopicEnsurer interface {
	Ensure(ctx context.Context, tenant string) (partitioning.TopicInfo, error)
}

// Config configures an Engine. Zero fields mean the documented defaults.
type Config struct {
	// ClientOpts connect the engine's Kafka clients (seed brokers, TLS,
	// SASL). Required: at least kgo.SeedBrokers. Consumer options are
	// added by the engine.
	ClientOpts []kgo.Opt
	// Naming derives tenant topic names; it must match the ingest side's.
	Naming partitioning.Naming
	// Topics, when set, creates a tenant's topic on its first subscription,
	// so a subscriber may arrive before the first event.
	Topics TopicEnsurer
	// Queue is the queue length of a subscription that asks for none.
	// Zero means DefaultQueue.
	Queue int
	// MaxQueue bounds the queue length a subscription may ask for. Zero
	// means DefaultMaxQueue.
	MaxQueue int
	// ReaderFetchBytes bounds what one fetch of a subscription's own Kafka
	// reader (a catch-up or a durable stream) may hold, in bytes as stored
	// (record batches are compressed: decoded they take about the
	// compression ratio times more): the reader buffers at most one fetch
	// while its client does not read, so this bounds a stream's Kafka
	// buffer whatever the topic holds (a single batch larger than it is
	// still fetched whole). Zero means DefaultReaderFetchBytes.
	ReaderFetchBytes int32
	// NodeID names this node in stream claims (the durable cluster's and
	// the forwarded feed's); empty means a random one.
	NodeID string
	Logger zerolog.Logger
	// Registerer receives the engine's metrics (aep_delivery_*). Nil
	// leaves them unregistered.
	Registerer prometheus.Registerer
	// MetricsMaxTenants caps the tenant label of per-tenant metrics: the
	// first tenants seen keep their name, later ones count as OtherTenant.
	// Zero means DefaultMetricsMaxTenants.
	MetricsMaxTenants int
	// LiveDelivery chooses how live events reach this node: LiveTail (the
	// zero value: a tail reader per tenant topic) or LiveWorkers (filter
	// workers forward matches to this node's delivery partition). A
	// cluster runs one mode: see docs/scaling.md.
	LiveDelivery LiveDelivery
	// Forward configures LiveWorkers; ignored otherwise.
	Forward ForwardConfig
	// PartitionCheck is how often a tail asks the cluster whether
	// partitions were added to its topic (an operator's
	// kafka-topics --alter --partitions); it then reads them from their
	// log start, and catch-ups joining it read them too. Zero means
	// DefaultPartitionCheck; negative never checks.
	PartitionCheck time.Duration
	// MemoryBudget and TenantMemoryBudget bound, in bytes decoded, the
	// events that catching-up streams (replays, resumes, fallbacks of slow
	// lossless subscribers) hold in their queues: on the node, and for each
	// tenant. A catch-up past either waits for its consumer (or another
	// tenant's) to take events before it reads on. Zero means the default;
	// negative means no bound.
	MemoryBudget, TenantMemoryBudget int64
	// CatchUpRate and TenantCatchUpRate pace catching-up streams, in bytes
	// decoded per second: on the node, and for each tenant, so that one
	// tenant's replays leave the broker and the node time for the others
	// (docs/security.md). Zero means the default; negative means no pacing.
	CatchUpRate, TenantCatchUpRate float64
}

// Engine reads tenant topics and fans their events out to subscriptions.
type Engine struct {
	cfg     Config
	budget  *membudget.Budget // catching-up streams' queued bytes
	pacer   *pace.Pacer       // catching-up streams' bytes per second
	metrics *metrics
	admCl   *kgo.Client
	adm     *kadm.Client
	nextID  atomic.Uint64

	// ctx is the parent of every tail and catch-up; cancel ends them all.
	ctx      context.Context
	cancel   context.CancelFunc
	goMu     sync.Mutex     // orders wg.Add before Close's wg.Wait; taken inside tail.mu, never around it
	goClosed bool           // guarded by goMu
	wg       sync.WaitGroup // catch-up goroutines

	mu     sync.Mutex
	tails  map[string]*tail // by topic; guarded by mu
	closed bool             // guarded by mu
	feed   *feed            // LiveWorkers only, started with the first tail; guarded by mu

	node string // this node in stream claims
}

// NewEngine validates cfg and returns an Engine. Its Kafka connections are
// made lazily; call Close when done.
func NewEngine(cfg Config) (*Engine, error) {
	if len(cfg.ClientOpts) == 0 {
		return nil, errors.New("engine: Config.ClientOpts must name the brokers")
	}
	if err := cfg.Naming.Validate(); err != nil {
		return nil, err
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = DefaultMaxQueue
	}
	if cfg.ReaderFetchBytes <= 0 {
		cfg.ReaderFetchBytes = DefaultReaderFetchBytes
	}
	if cfg.PartitionCheck == 0 {
		cfg.PartitionCheck = DefaultPartitionCheck
	}
	if cfg.MemoryBudget == 0 {
		cfg.MemoryBudget = DefaultMemoryBudget
	}
	if cfg.TenantMemoryBudget == 0 {
		cfg.TenantMemoryBudget = DefaultTenantMemoryBudget
	}
	if cfg.CatchUpRate == 0 {
		cfg.CatchUpRate = DefaultCatchUpRate
	}
	if cfg.TenantCatchUpRate == 0 {
		cfg.TenantCatchUpRate = DefaultTenantCatchUpRate
	}
	mode, err := ParseLiveDelivery(string(cfg.LiveDelivery))
	if err != nil {
		return nil, err
	}
	cfg.LiveDelivery = mode
	cfg.Forward.fill()
	if cfg.Queue > cfg.MaxQueue {
		return nil, fmt.Errorf("engine: Queue %d exceeds MaxQueue %d", cfg.Queue, cfg.MaxQueue)
	}
	cl, err := kgo.NewClient(cfg.ClientOpts...)
	if err != nil {
		return nil, fmt.Errorf("engine: admin client: %w", err)
	}
	node := cfg.NodeID
	if node == "" {
		node = "node-" + ulid.Make().String()
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Engine{
		cfg: cfg, metrics: newMetrics(cfg.Registerer, cfg.MetricsMaxTenants), admCl: cl, adm: kadm.NewClient(cl), ctx: ctx, cancel: cancel,
		tails: map[string]*tail{}, node: node, budget: membudget.New(cfg.MemoryBudget, cfg.TenantMemoryBudget),
		pacer: pace.New(cfg.CatchUpRate, cfg.TenantCatchUpRate),
	}
	e.metrics.registerBudget(cfg.Registerer, e.budget)
	if cfg.LiveDelivery == LiveWorkers && e.startGoroutines(1) {
		go e.warmFeed()
	}
	return e, nil
}

// NodeID names this node in stream claims.
func (e *Engine) NodeID() string { return e.node }

// Request describes one subscription.
type Request struct {
	Tenant tenant.Tenant
	Filter *filtering.Filter
	// From is the position to start at, one entry per partition to replay
	// (the frontier of a decoded cursor, after cursor.TopicState.Check).
	// Nil means live: events appended after Subscribe returns. A partition
	// From does not name is read live from the moment of the handover.
	From []cursor.PartitionOffset
	// Sequence is the delivery sequence already used (a resumed cursor's
	// Sequence); the first delivery carries Sequence+1.
	Sequence uint64
	// Queue is the subscription's queue length; zero means Config.Queue.
	Queue int
	// Lossless moves the subscription back to catch-up reading when its
	// queue is full, instead of dropping the event.
	Lossless bool
}

// Subscribe starts a subscription. ctx bounds only the setup (topic
// creation, reading the topic's end offsets); the subscription lives until
// Close or the Engine's Close.
func (e *Engine) Subscribe(ctx context.Context, req Request) (*Subscription, error) {
	if req.Filter == nil {
		return nil, fmt.Errorf("%w: no filter", ErrBadRequest)
	}
	if req.Tenant.IsZero() {
		return nil, fmt.Errorf("%w: no tenant", ErrBadRequest)
	}
	q := req.Queue
	if q <= 0 {
		q = e.cfg.Queue
	}
	if q > e.cfg.MaxQueue {
		return nil, fmt.Errorf("%w: queue %d exceeds %d", ErrBadRequest, q, e.cfg.MaxQueue)
	}
	if err := e.ensure(ctx, req.Tenant); err != nil {
		return nil, err
	}
	t, err := e.acquire(ctx, req.Tenant.String(), e.cfg.Naming.Events(req.Tenant.String()))
	if err != nil {
		return nil, err
	}
	s := &Subscription{
		e: e, t: t, id: filtering.ID(e.nextID.Add(1)), filter: req.Filter,
		q: queue.New[Delivery](q), seq: req.Sequence, lossless: req.Lossless,
	}
	// Counted from here on: every path below ends in finish (which
	// uncounts it) except a failed live join, which uncounts it itself.
	e.metrics.subscriptions.Inc()
	if t.feed != nil {
		return e.subscribeForwarded(ctx, s, req.From)
	}
	if req.From == nil {
		start, err := t.join(s, nil, 0, false, false)
		if err != nil {
			e.metrics.subscriptions.Dec()
			e.release(t)
			return nil, err
		}
		s.start = start
		return s, nil
	}
	if !s.startCatchUp(append([]cursor.PartitionOffset(nil), req.From...), false) {
		s.Close()
		return nil, ErrClosed
	}
	return s, nil
}

// acquire returns the running tail of topic, starting it if needed, and
// takes a reference on it.
func (e *Engine) acquire(ctx context.Context, tenant, topic string) (*tail, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	if e.cfg.LiveDelivery == LiveWorkers && e.feed == nil {
		f, err := startFeed(ctx, e)
		if err != nil {
			return nil, err
		}
		e.feed = f
	}
	t := e.tails[topic]
	if t == nil {
		var err error
		if t, err = startTail(ctx, e, tenant, topic); err != nil {
			return nil, err
		}
		e.tails[topic] = t
		if e.feed != nil {
			e.feed.add(t)
		}
	}
	t.refs++
	return t, nil
}

// release drops a reference on t and stops it when it was the last.
func (e *Engine) release(t *tail) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t.refs--
	// A forwarded feed's tail stays: it holds the last source offset
	// forwarded per partition, which drops duplicates after a worker restart.
	if t.refs > 0 || e.tails[t.topic] != t || t.feed != nil {
		return
	}
	delete(e.tails, t.topic)
	t.stop(ErrClosed)
}

// State reads the current shape of a tenant's events topic (ID, partition
// count, offset bounds), for cursor checks.
func (e *Engine) State(ctx context.Context, t tenant.Tenant) (cursor.TopicState, error) {
	if t.IsZero() {
		return cursor.TopicState{}, fmt.Errorf("%w: no tenant", ErrBadRequest)
	}
	if err := e.ensure(ctx, t); err != nil {
		return cursor.TopicState{}, err
	}
	return cursor.LoadTopicState(ctx, e.adm, e.cfg.Naming.Events(t.String()))
}

// ensure creates the tenant's topics on first use, when Config.Topics is
// set.
func (e *Engine) ensure(ctx context.Context, t tenant.Tenant) error {
	if e.cfg.Topics == nil {
		return nil
	}
	if _, err := e.cfg.Topics.Ensure(ctx, t.String()); err != nil {
		return fmt.Errorf("engine: ensure topics: %w", err)
	}
	return nil
}

// Close ends every subscription with ErrClosed, stops every reader and
// waits for them. It is idempotent.
func (e *Engine) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	e.cancel()
	if e.feed != nil {
		e.feed.stop() // before the tails: its reader hands records to them
	}
	for topic, t := range e.tails {
		delete(e.tails, topic)
		t.stop(ErrClosed) // no tail starts a catch-up after this
	}
	e.mu.Unlock()
	e.goMu.Lock()
	e.goClosed = true
	e.goMu.Unlock()
	e.wg.Wait() // catch-ups end their own subscriptions
	e.admCl.Close()
}

// startGoroutines reserves n goroutines in the engine's WaitGroup, which
// Close waits for; false once Close has begun: the caller then starts none
// and releases what it made for them.
func (e *Engine) startGoroutines(n int) bool {
	e.goMu.Lock()
	defer e.goMu.Unlock()
	if e.goClosed {
		return false
	}
	e.wg.Add(n)
	return true
}

// readerOpts are the client options of a subscription's own reader of
// topic from offs: the engine's connection options, fetches bounded by
// ReaderFetchBytes, one fetch in flight.
func (e *Engine) readerOpts(topic string, offs map[int32]kgo.Offset) []kgo.Opt {
	return append(append(e.metadataOpts(), e.cfg.ClientOpts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offs}),
		kgo.FetchMaxBytes(e.cfg.ReaderFetchBytes),
		kgo.FetchMaxPartitionBytes(e.cfg.ReaderFetchBytes),
		kgo.MaxConcurrentFetches(1),
	)
}

// metadataOpts bound how stale a reader's metadata may get to
// PartitionCheck: a reader that was handed added partitions
// (AddConsumePartitions) fetches them only once its metadata shows them,
// and the refresh that call triggers can be answered by one already in
// flight from before the change; without a max age the next look would be
// franz-go's default, 5 minutes later (a catch-up waiting to join, a
// durable stream or a tail idle that long). Franz-go refuses a max age
// under the min age (5 s by default), so the min age follows.
func (e *Engine) metadataOpts() []kgo.Opt {
	d := e.cfg.PartitionCheck
	if d <= 0 {
		return nil
	}
	return []kgo.Opt{kgo.MetadataMaxAge(d), kgo.MetadataMinAge(min(d, 5*time.Second))}
}
