package durable

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

var (
	// ErrClosed is engine.ErrClosed: streams and followers end with it
	// when the Cluster closes.
	ErrClosed = engine.ErrClosed
	// ErrBadRequest is engine.ErrBadRequest: it wraps a request that can
	// never succeed.
	ErrBadRequest = engine.ErrBadRequest
)

// Event is the engine's decoded event, as durable streams deliver it.
type Event = engine.Event

// Engine is what the durable cluster uses of the delivery engine.
// *engine.Engine satisfies it. Every method is safe for concurrent use and
// takes no lock of the Cluster's.
type Engine interface {
	// NodeID names this node in stream claims.
	NodeID() string
	// State reads the shape of the tenant's events topic, creating it
	// first when the engine creates topics.
	State(ctx context.Context, t tenant.Tenant) (cursor.TopicState, error)
	// EnsureTopics creates the tenant's topics on first use, when the
	// engine creates topics.
	EnsureTopics(ctx context.Context, t tenant.Tenant) error
	// ReaderOpts are the client options of a stream's own reader of topic
	// from offs.
	ReaderOpts(topic string, offs map[int32]kgo.Offset) []kgo.Opt
	// QueueLimits are the default and the largest queue length.
	QueueLimits() (queue, maxQueue int)
	// ReaderFetchBytes is about what one fetch of a reader decodes to.
	ReaderFetchBytes() int32
	// CountDelivered counts one event queued to a subscriber.
	CountDelivered()
	// TenantLabel is the capped tenant label of per-tenant metrics.
	TenantLabel(t string) string
	// TailPositions copies the positions of the node's shared tails.
	TailPositions() []engine.TailPosition
	// Refused counts a request refused by limit.
	Refused(limit string)
}

var _ Engine = (*engine.Engine)(nil)

// Config configures a Cluster. Zero fields mean the documented defaults.
type Config struct {
	// ClientOpts connect the cluster's Kafka clients (seed brokers, TLS,
	// SASL); they must reach the engine's brokers. Required.
	ClientOpts []kgo.Opt
	// Naming derives tenant topic names; it must match the engine's.
	Naming partitioning.Naming
	// ReplicationFactor of the topics the cluster creates itself (the
	// subscription journal). Zero means -1: the broker's default.
	ReplicationFactor int16
	Logger            zerolog.Logger
	// Registerer receives the durable metrics (aep_delivery_durable_*,
	// redeliveries, dead letters, journal and lag series). Nil leaves them
	// unregistered.
	Registerer prometheus.Registerer
	// SubscriptionLagTop is how many durable subscriptions of this node,
	// the most lagging, get an aep_delivery_subscription_lag_records
	// series. Zero means none.
	SubscriptionLagTop int
	// PartitionCheck is how often a durable stream asks the cluster
	// whether partitions were added to its topic; it then reads them from
	// their log start and commits them with the rest. Zero means
	// DefaultPartitionCheck; negative never checks.
	PartitionCheck time.Duration

	// queue and maxQueue are the engine's (QueueLimits), set by New.
	queue, maxQueue int
	// readerFetch is the engine's ReaderFetchBytes, set by New.
	readerFetch int32
}

// DefaultPartitionCheck is how often a durable stream looks for
// partitions added to its topic.
const DefaultPartitionCheck = 10 * time.Second

// Cluster serves durable at_least_once subscriptions on this node in
// cooperation with the other nodes, through Kafka only (doc.go).
type Cluster struct {
	cfg     Config
	eng     Engine
	metrics *metrics
	lag     *lagCollector
	admCl   *kgo.Client
	adm     *kadm.Client
	node    string // this node in stream claims: the engine's NodeID

	// ctx is the parent of every stream, follower and janitor; cancel
	// ends them all.
	ctx      context.Context
	cancel   context.CancelFunc
	goMu     sync.Mutex     // orders wg.Add before Close's wg.Wait
	goClosed bool           // guarded by goMu
	wg       sync.WaitGroup // every goroutine the Cluster starts

	jmu      sync.Mutex               // never held with a stream's mu
	journals map[string]*journalSetup // by tenant; guarded by jmu
	defs     map[string]*defsFollower // by tenant; guarded by jmu
}

// New validates cfg and returns a Cluster on eng. Its Kafka connections
// are made lazily; call Close when done, before closing eng.
func New(cfg Config, eng Engine) (*Cluster, error) {
	if eng == nil {
		return nil, errors.New("durable: no engine")
	}
	if len(cfg.ClientOpts) == 0 {
		return nil, errors.New("durable: Config.ClientOpts must name the brokers")
	}
	if err := cfg.Naming.Validate(); err != nil {
		return nil, err
	}
	if cfg.ReplicationFactor == 0 {
		cfg.ReplicationFactor = -1
	}
	if cfg.PartitionCheck == 0 {
		cfg.PartitionCheck = DefaultPartitionCheck
	}
	cfg.queue, cfg.maxQueue = eng.QueueLimits()
	cfg.readerFetch = eng.ReaderFetchBytes()
	cl, err := kgo.NewClient(cfg.ClientOpts...)
	if err != nil {
		return nil, fmt.Errorf("durable: admin client: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Cluster{
		cfg: cfg, eng: eng, metrics: newMetrics(cfg.Registerer), admCl: cl, adm: kadm.NewClient(cl),
		node: eng.NodeID(), ctx: ctx, cancel: cancel,
		journals: map[string]*journalSetup{}, defs: map[string]*defsFollower{},
	}
	e.lag = newLagCollector(e, cfg.SubscriptionLagTop)
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(e.lag)
	}
	return e, nil
}

// NodeID names this node in stream claims.
func (e *Cluster) NodeID() string { return e.node }

// Close ends every durable stream, follower and janitor and waits for
// them. It is idempotent.
func (e *Cluster) Close() {
	e.goMu.Lock()
	if e.goClosed {
		e.goMu.Unlock()
		return
	}
	e.goClosed = true
	e.cancel()
	e.goMu.Unlock()
	e.wg.Wait()
	e.admCl.Close()
}

// startGoroutines reserves n goroutines in the cluster's WaitGroup, which
// Close waits for; false once Close has begun: the caller then starts none
// and releases what it made for them.
func (e *Cluster) startGoroutines(n int) bool {
	e.goMu.Lock()
	defer e.goMu.Unlock()
	if e.goClosed {
		return false
	}
	e.wg.Add(n)
	return true
}

// State reads the shape of the tenant's events topic (Engine.State).
func (e *Cluster) State(ctx context.Context, t tenant.Tenant) (cursor.TopicState, error) {
	return e.eng.State(ctx, t)
}

func (e *Cluster) ensure(ctx context.Context, t tenant.Tenant) error {
	return e.eng.EnsureTopics(ctx, t)
}

func (e *Cluster) readerOpts(topic string, offs map[int32]kgo.Offset) []kgo.Opt {
	return e.eng.ReaderOpts(topic, offs)
}

// Refused counts a request refused by limit (Engine.Refused).
func (e *Cluster) Refused(limit string) { e.eng.Refused(limit) }
