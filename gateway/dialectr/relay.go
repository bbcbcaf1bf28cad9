package dialectr

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/ingest"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// Defaults for zero Config fields.
const (
	DefaultPing             = 15 * time.Second
	DefaultWriteTimeout     = 10 * time.Second
	DefaultQueue            = 1024
	DefaultMaxFrom          = 64
	DefaultMaxSubscriptions = 16
	DefaultOutbound         = 256
	DefaultDedupe           = 1 << 16
	// DefaultTrackedSessions bounds the sessions per subscription whose
	// last delivered position a WebSocket closing frame lists.
	DefaultTrackedSessions = 256
)

// ErrClosed: the Relay is closed (new streams get 503).
var ErrClosed = errors.New("dialectr: closed")

// TopicEnsurer creates a tenant's topics (events and index) on first use.
// *partitioning.Provisioner satisfies it.
type TopicEnsurer interface {
	Ensure(ctx context.Context, tenant string) (partitioning.TopicInfo, error)
}

// Config configures a Relay. Zero fields mean the documented defaults.
type Config struct {
	// Engine delivers events. Required. The Relay does not close it.
	Engine *engine.Engine
	// Ingest writes WebSocket emitters' events, as POST /events does. Nil
	// refuses the emitter role.
	Ingest ingest.Func
	// ClientOpts reach the cluster for the per-tenant Indexer and
	// Resolver (seed brokers, TLS, SASL). Required.
	ClientOpts []kgo.Opt
	// PartitionCheck bounds how long the tenant's indexer group takes to
	// learn of partitions added to the events topic (its metadata max
	// age); zero or less leaves franz-go's default, 5 minutes.
	PartitionCheck time.Duration
	// Naming must match the ingest side's.
	Naming partitioning.Naming
	// Topics, when set, creates the tenant's topics (including the index
	// topic the Indexer writes to) before its first resume.
	Topics TopicEnsurer
	// Index tunes the Indexer's checkpoint spacing (Distance, Every);
	// topic names, group and client options are filled in per tenant.
	Index cursor.IndexerConfig

	// Ping is the SSE heartbeat and WebSocket ping period (AEP-0003 §3.3
	// rule 4, §3.5 rule 5); a WebSocket peer silent for three periods is
	// closed. Zero means DefaultPing; it must not exceed 30s.
	Ping time.Duration
	// WriteTimeout bounds one write to a client. Zero means
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// Queue is each subscription's delivery queue. Subscriptions are
	// lossless: one that overflows it goes back to reading Kafka, nothing
	// is dropped. Zero means DefaultQueue.
	Queue int
	// MaxFrom bounds the resume positions of one subscription. Zero means
	// DefaultMaxFrom.
	MaxFrom int
	// MaxSubscriptions bounds the subscriptions of one WebSocket
	// connection. Zero means DefaultMaxSubscriptions.
	MaxSubscriptions int
	// Outbound is a WebSocket connection's outbound frame queue. Zero
	// means DefaultOutbound.
	Outbound int
	// Dedupe bounds the (source, id) pairs remembered during one replay.
	// Zero means DefaultDedupe.
	Dedupe int
	// Hub admits every stream and connection with the node's other
	// streams (one per-tenant cap for every binding) and ends them on
	// shutdown. Nil means a Hub of the Relay's own, capped by
	// MaxStreamsPerTenant.
	Hub *transport.Hub
	// MaxStreamsPerTenant bounds the SSE streams plus WebSocket
	// connections a tenant holds open on this node, when the Relay has a
	// Hub of its own. Zero means no bound.
	MaxStreamsPerTenant int
	// ReplayBuffer is the replay.buffer depth advertised in hello and
	// discovery: the events per session a resume replays at most (the
	// latest ones the log holds at the request; a position predating them
	// gets replay-exhausted). Zero or less: no bound but the log's
	// retention, advertised as 0.
	ReplayBuffer int
	// Authenticated says every request reaching the Relay was
	// authenticated (API keys or JWT). Without it commands are refused
	// (AEP-0004 §4.1) and capabilities.control is not advertised.
	Authenticated bool
	// ControlPolicy decides who may command whom per tenant; the zero
	// value lets every authenticated sender of a tenant command its claims.
	ControlPolicy ControlPolicy
	// NodeID names this node in the presence and control topics; empty
	// means a random id per process.
	NodeID string
	// ReplicationFactor of the presence and control topics the Relay
	// creates; zero means the broker's default.
	ReplicationFactor int16
	// PresenceTTL is how long another node trusts a claim of this node
	// without renewal (renewed every third of it). Zero means
	// DefaultPresenceTTL.
	PresenceTTL time.Duration
	// OriginPatterns are the cross-origin hosts allowed to open WebSockets
	// (coder/websocket AcceptOptions). Same-origin is always allowed.
	OriginPatterns []string
	// Limits bound events parsed for down-leveling (zero: aep defaults).
	Limits aep.Limits
	// FilterLimits bound filters (zero: filtering defaults).
	FilterLimits filtering.Limits
	Logger       zerolog.Logger
}

// Relay serves the dialect R consuming bindings.
type Relay struct {
	cfg    Config
	hub    *transport.Hub
	ownHub bool

	nodeID string
	connID atomic.Uint64
	wsLogs transport.LoggerCache // a WebSocket connection's logger, per tenant

	mu        sync.Mutex
	closed    bool
	tenants   map[string]*tenantIndex
	presences map[string]*presenceEntry

	routedMu  sync.Mutex
	routed    map[routedKey]struct{} // commands this node routed (recent)
	routedOld map[routedKey]struct{} // the generation before
}

// tenantIndex is a tenant's resume machinery, created once.
type tenantIndex struct {
	ready chan struct{}
	ix    *cursor.Indexer
	res   *cursor.Resolver
	err   error
}

// New validates cfg and returns a Relay. Call Close when done.
func New(cfg Config) (*Relay, error) {
	if cfg.Engine == nil {
		return nil, errors.New("dialectr: Config.Engine is required")
	}
	if len(cfg.ClientOpts) == 0 {
		return nil, errors.New("dialectr: Config.ClientOpts must name the brokers")
	}
	if err := cfg.Naming.Validate(); err != nil {
		return nil, fmt.Errorf("dialectr: %w", err)
	}
	if cfg.Ping <= 0 {
		cfg.Ping = DefaultPing
	}
	if cfg.Ping > 30*time.Second {
		return nil, fmt.Errorf("dialectr: Ping %s exceeds the 30s AEP-0003 §3.3 asks for", cfg.Ping)
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.Queue, DefaultQueue)
	def(&cfg.MaxFrom, DefaultMaxFrom)
	def(&cfg.MaxSubscriptions, DefaultMaxSubscriptions)
	def(&cfg.Outbound, DefaultOutbound)
	def(&cfg.Dedupe, DefaultDedupe)
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.PresenceTTL <= 0 {
		cfg.PresenceTTL = DefaultPresenceTTL
	}
	rl := &Relay{cfg: cfg, hub: cfg.Hub, tenants: map[string]*tenantIndex{}, presences: map[string]*presenceEntry{},
		nodeID: cfg.NodeID, routed: map[routedKey]struct{}{}}
	if rl.nodeID == "" {
		rl.nodeID = newNodeID()
	}
	if rl.hub == nil {
		rl.hub, rl.ownHub = transport.NewHub(cfg.MaxStreamsPerTenant), true
	}
	return rl, nil
}

// admit admits a stream of the request's tenant through the Hub, or
// answers the refusal; the caller Leaves the stream when it ends.
func (rl *Relay) admit(w http.ResponseWriter, r *http.Request) (tenant.Tenant, *transport.Stream, bool) {
	tn, _ := tenant.FromContext(r.Context())
	stream, err := rl.hub.Enter(tn.String(), nil)
	if err != nil {
		refuseEntry(w, err)
		return tn, nil, false
	}
	return tn, stream, true
}

// refuseEntry answers a stream the Hub did not admit.
func refuseEntry(w http.ResponseWriter, err error) {
	if errors.Is(err, transport.ErrTenantLimit) {
		writeError(w, http.StatusTooManyRequests, aep.CodeRLimitExceeded, "this tenant holds the most streams and connections allowed; close one first")
		return
	}
	writeError(w, http.StatusServiceUnavailable, "unavailable", "the relay is shutting down")
}

// Shutdown ends every SSE stream (with a closing comment) and WebSocket
// connection (with a closing frame) when the Relay owns its Hub, waits for
// them up to ctx, then stops the indexers and resolvers. With a shared Hub
// the Hub's owner shuts the streams down first. Streams asked for after
// Shutdown get 503. It is idempotent and returns ctx.Err() when ctx ended
// before the streams did.
func (rl *Relay) Shutdown(ctx context.Context) error {
	var err error
	if rl.ownHub {
		err = rl.hub.Shutdown(ctx)
	}
	rl.mu.Lock()
	if rl.closed {
		rl.mu.Unlock()
		return err
	}
	rl.closed = true
	tenants := rl.tenants
	rl.tenants = map[string]*tenantIndex{}
	presences := rl.presences
	rl.presences = map[string]*presenceEntry{}
	rl.mu.Unlock()
	rl.stopPresences(presences)
	for _, ti := range tenants {
		<-ti.ready
		if ti.res != nil {
			ti.res.Close()
		}
		if ti.ix != nil {
			if ierr := ti.ix.Close(); ierr != nil {
				rl.cfg.Logger.Warn().Err(ierr).Msg("dialectr: indexer stopped early")
			}
		}
	}
	return err
}

// resolver returns the tenant's Resolver, starting its Indexer and Resolver
// on first use. A failed start is forgotten so a later call retries.
func (rl *Relay) resolver(ctx context.Context, tenant string) (*cursor.Resolver, error) {
	rl.mu.Lock()
	if rl.closed {
		rl.mu.Unlock()
		return nil, ErrClosed
	}
	ti, ok := rl.tenants[tenant]
	if !ok {
		ti = &tenantIndex{ready: make(chan struct{})}
		rl.tenants[tenant] = ti
		rl.mu.Unlock()
		ti.ix, ti.res, ti.err = rl.newIndex(ctx, tenant)
		close(ti.ready)
		if ti.err != nil {
			rl.mu.Lock()
			if rl.tenants[tenant] == ti {
				delete(rl.tenants, tenant)
			}
			rl.mu.Unlock()
		}
		return ti.res, ti.err
	}
	rl.mu.Unlock()
	select {
	case <-ti.ready:
		return ti.res, ti.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// startIndex makes sure the tenant's indexer runs, so that checkpoints
// exist by the time a client resumes: every stream calls it, resuming or
// not. A live stream does not need the index, so a failure is only logged
// (the next stream retries); a resume fails on its own when it needs it.
func (rl *Relay) startIndex(ctx context.Context, tenant string) {
	if _, err := rl.resolver(ctx, tenant); err != nil && ctx.Err() == nil && !errors.Is(err, ErrClosed) {
		rl.cfg.Logger.Error().Err(err).Str("tenant", tenant).Msg("dialectr: start the tenant's indexer")
	}
}

func (rl *Relay) newIndex(ctx context.Context, tenant string) (*cursor.Indexer, *cursor.Resolver, error) {
	if rl.cfg.Topics != nil {
		if _, err := rl.cfg.Topics.Ensure(ctx, tenant); err != nil {
			return nil, nil, fmt.Errorf("dialectr: ensure topics: %w", err)
		}
	}
	events, index := rl.cfg.Naming.Events(tenant), rl.cfg.Naming.Index(tenant)
	icfg := rl.cfg.Index
	icfg.EventsTopic, icfg.IndexTopic, icfg.Group = events, index, events+".indexer"
	icfg.ClientOpts = rl.cfg.ClientOpts
	if d := rl.cfg.PartitionCheck; d > 0 {
		// added partitions indexed from their start (franz-go refuses a
		// max age under the min age, 5 s by default)
		icfg.ClientOpts = append(slices.Clip(rl.cfg.ClientOpts), kgo.MetadataMaxAge(d), kgo.MetadataMinAge(min(d, 5*time.Second)))
	}
	ix, err := cursor.NewIndexer(icfg)
	if err != nil {
		return nil, nil, fmt.Errorf("dialectr: indexer: %w", err)
	}
	res, err := cursor.NewResolver(cursor.ResolverConfig{EventsTopic: events, IndexTopic: index, ClientOpts: rl.cfg.ClientOpts})
	if err != nil {
		_ = ix.Close()
		return nil, nil, fmt.Errorf("dialectr: resolver: %w", err)
	}
	return ix, res, nil
}

// Indexed reports the offset below which this node's indexer has written
// the checkpoints of a tenant's partition, and whether it has indexed that
// partition at all (false too when the tenant's indexer has not started:
// it starts on the tenant's first stream). For readiness checks and tests.
func (rl *Relay) Indexed(tenant string, partition int32) (int64, bool) {
	rl.mu.Lock()
	ti, ok := rl.tenants[tenant]
	rl.mu.Unlock()
	if !ok {
		return 0, false
	}
	select {
	case <-ti.ready:
	default:
		return 0, false
	}
	if ti.ix == nil {
		return 0, false
	}
	return ti.ix.Indexed(partition)
}

// IndexCaughtUp reports whether the tenant's resolver has read the index
// topic up to its current end, so that a resume sees every checkpoint
// written so far (false when the tenant's index has not started). A
// resolver that lags only makes resumes scan more, except that it cannot
// tell retention gaps it has not read the checkpoints of. For readiness
// checks and tests.
func (rl *Relay) IndexCaughtUp(ctx context.Context, tenant string) (bool, error) {
	rl.mu.Lock()
	ti, ok := rl.tenants[tenant]
	rl.mu.Unlock()
	if !ok {
		return false, nil
	}
	select {
	case <-ti.ready:
	default:
		return false, nil
	}
	if ti.res == nil {
		return false, nil
	}
	return ti.res.CaughtUp(ctx)
}
