package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/cors"
	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/ingest/dedup"
	"github.com/aep-gateway/aep-gateway/gateway/principal"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// Config configures a Server. Zero fields mean the documented defaults.
type Config struct {
	Limits Limits
	// AuditKeys, when set, is the published key set of the audit
	// checkpoints (auditlog.KeySetDoc JSON), served without credentials
	// at /.well-known/aep-audit-keys (docs/audit.md).
	AuditKeys []byte
	// Keys authenticates requests by API key. With neither Keys nor JWT
	// the server runs in development mode: every request is tenant
	// "default" (the caller must make that loud).
	Keys *KeyStore
	// JWT authenticates bearer tokens that are JWTs (tenant from a claim).
	JWT *JWTVerifier
	// Naming derives tenant topic names (for responses); it must match the
	// TopicResolver's.
	Naming partitioning.Naming
	// KeyStrategy chooses record keys. Zero is partitioning.KeySession.
	KeyStrategy partitioning.KeyStrategy
	// WriteTimeout bounds one ingest request's wait for Kafka. Zero means 30s.
	WriteTimeout time.Duration
	// ProduceTimeout bounds the wait for Kafka's acknowledgement of a
	// request's events (within WriteTimeout); an event unacknowledged then
	// is answered "may or may not be in the log". Zero means 3s.
	ProduceTimeout time.Duration
	// Dedup bounds the idempotency window (retries of an event identity
	// answered with the first write's position). Zero fields take
	// dedup's defaults; Dedup.Max < 0 turns the window off.
	Dedup dedup.Config
	// RateLimit bounds each tenant's ingest rate. Zero disables it.
	RateLimit RateLimit
	// CORSOrigins are the browser origins allowed to call the HTTP routes
	// (ParseCORSOrigins). Nil means none: a request with another Origin
	// than the gateway's own is refused. Give WebSocketOriginPatterns of
	// the same list to the WebSocket bindings.
	CORSOrigins []string
	// DevAnyHost lets development mode answer any Host. Zero (the
	// default) answers only loopback names: the DNS-rebinding defence of
	// a developer's gateway. Set it only for a deliberately exposed
	// unauthenticated gateway (--allow-unauthenticated).
	DevAnyHost bool
	// ReadTimeout bounds how long a request body may take to arrive, on
	// ingest (408 past it) and mounted routes (the handler's read fails).
	// Zero means no bound beyond the http.Server's.
	ReadTimeout time.Duration
	// MaxInflightBytesPerTenant bounds the ingest body bytes one tenant
	// may have in flight (read, not yet answered); past it 429. Zero means
	// unbounded.
	MaxInflightBytesPerTenant int64
	// ReadyInterval is the broker probe period. Zero means 2s.
	ReadyInterval time.Duration
	Logger        zerolog.Logger
	// AccessLogSampleN writes one access log line (info level) per N
	// requests; server errors are always written. Zero means 1: every request.
	AccessLogSampleN int
	// Registry receives the gateway's metrics and is served on /metrics.
	// Nil means a fresh registry with the Go and process collectors.
	Registry *prometheus.Registry
	// MetricsCacheTTL is how long a /metrics rendering is served again
	// (scrapeCache). Zero means DefaultMetricsCacheTTL (1s); negative
	// renders every scrape.
	MetricsCacheTTL time.Duration
	// MaxMetricsScrapes bounds the /metrics scrapes served at once; past
	// it 503. Zero means DefaultMaxMetricsScrapes (32).
	MaxMetricsScrapes int
	// SeparateAdmin moves /metrics and /readyz's details off the public
	// handler (Handler) to AdminHandler, served on an admin listener of its
	// own (--admin-listen): what they show (tenant names, subscription
	// ids, the broker's address) then never reaches the public side, whose
	// /readyz answers the status alone.
	SeparateAdmin bool
}

// Deps are the Kafka-facing parts a Server uses.
type Deps struct {
	Topics  TopicResolver
	Writer  Writer
	Pinger  Pinger
	Auditor OffsetAuditor // optional
	// Provisioning are more topics' provisioners whose last failure
	// /readyz reports, as it does the tenant topics' (optional).
	Provisioning []ProvisioningReporter
	// Checks are more parts of the node /readyz asks (optional).
	Checks []ReadinessCheck
}

// Server is the gateway's HTTP surface.
type Server struct {
	cfg      Config
	log      zerolog.Logger
	metrics  *metrics
	ingest   *ingestor
	ready    *readiness
	limiter  *tenantLimiter // nil when rate limiting is off
	inflight *inflight      // nil when in-flight bytes are unbounded
	router   chi.Router
	access   *accessLogger
	corsLib  *cors.Cors // nil without allowed origins

	// The discovery document's variable parts; set before serving.
	discoEndpoints map[string]string
	discoCaps      any

	startOnce, shutdownOnce sync.Once
}

// DefaultProduceTimeout is Config.ProduceTimeout's default.
const DefaultProduceTimeout = 3 * time.Second

// New builds a Server. Call Start to begin probing the broker, serve
// Handler, and call Shutdown when done.
func New(cfg Config, deps Deps) (*Server, error) {
	if deps.Topics == nil || deps.Writer == nil || deps.Pinger == nil {
		return nil, errors.New("gateway: Topics, Writer and Pinger are required")
	}
	if err := cfg.Naming.Validate(); err != nil {
		return nil, err
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	if cfg.ReadyInterval <= 0 {
		cfg.ReadyInterval = 2 * time.Second
	}
	if cfg.ProduceTimeout <= 0 {
		cfg.ProduceTimeout = DefaultProduceTimeout
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
		cfg.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	cfg.Limits = cfg.Limits.withDefaults()
	m := newMetrics(cfg.Registry)
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		metrics: m,
		corsLib: newCORS(cfg.CORSOrigins),
		ingest: &ingestor{
			limits: cfg.Limits, topics: deps.Topics, writer: deps.Writer, keys: cfg.KeyStrategy,
			auditor: deps.Auditor, timeout: cfg.WriteTimeout, produce: cfg.ProduceTimeout, metrics: m,
		},
		ready: newReadiness(deps.Pinger, reporters(deps.Topics, deps.Provisioning), deps.Checks, cfg.ReadyInterval, m),

		discoEndpoints: map[string]string{"events": "/events"},
		discoCaps:      map[string]any{"experimental": map[string]any{}},
	}
	s.ingest.down = s.ready.brokerDown
	if cfg.Dedup.Max >= 0 {
		s.ingest.window = dedup.New(cfg.Dedup)
	}
	if cfg.RateLimit.enabled() {
		s.limiter = newTenantLimiter(cfg.RateLimit, time.Now)
	}
	s.access = newAccessLogger(cfg.Logger, cfg.AccessLogSampleN)
	if cfg.MaxInflightBytesPerTenant > 0 {
		s.inflight = newInflight(cfg.MaxInflightBytesPerTenant)
	}
	s.router = s.routes()
	return s, nil
}

func (s *Server) routes() chi.Router {
	r := chi.NewRouter()
	r.Use(s.bodyDeadline, s.access.middleware, s.recoverer, s.metrics.instrument, s.devHostGuard, s.cors)

	r.MethodNotAllowed(s.methodNotAllowed)
	r.Get("/healthz", handleHealthz)
	if !s.cfg.SeparateAdmin {
		s.adminRoutes(r)
	} else {
		r.Get("/readyz", s.ready.handleBrief)
	}
	r.Get("/.well-known/aep", s.handleDiscovery)
	r.Get("/events", s.handleDiscovery)
	if s.cfg.AuditKeys != nil {
		r.Get(auditKeysPath, s.handleAuditKeys)
	}

	r.With(authenticate(s.auth(), aep.DialectR), s.bodyGuard(aep.DialectR), traceIngest("/events")).Post("/events", s.handleIngestR)
	r.With(authenticate(s.auth(), aep.DialectD), s.bodyGuard(aep.DialectD), traceIngest("/aep/events")).Post("/aep/events", s.handleIngestD)
	return r
}

// publicPaths are the routes that take no credential: a method they do
// not take gets 405 at once. On every other route 405 comes only after
// authentication (401 first), so an unauthenticated client learns nothing
// about the routes from the methods they take.
var publicPaths = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true, "/.well-known/aep": true, auditKeysPath: true}

// auditKeysPath publishes the public keys of the audit checkpoints.
const auditKeysPath = "/.well-known/aep-audit-keys"

func (s *Server) handleAuditKeys(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=300")
	_, _ = w.Write(s.cfg.AuditKeys)
}

// methodNotAllowed answers a method the route does not take: 405 with
// Allow, after authentication in the route's dialect (dialect D under
// /aep, R elsewhere) unless the route is public.
func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	answer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions} {
			if s.router.Match(chi.NewRouteContext(), m, r.URL.Path) {
				w.Header().Add("Allow", m)
			}
		}
		w.WriteHeader(http.StatusMethodNotAllowed)
	})
	if publicPaths[r.URL.Path] {
		answer(w, r)
		return
	}
	d := aep.DialectR
	if r.URL.Path == "/aep" || strings.HasPrefix(r.URL.Path, "/aep/") {
		d = aep.DialectD
	}
	authenticate(s.auth(), d)(answer).ServeHTTP(w, r)
}

func (s *Server) auth() Authenticator {
	return Authenticator{Keys: s.cfg.Keys, JWT: s.cfg.JWT, Log: s.cfg.Logger}
}

// verifyToken verifies event-level bearer tokens with the transport's
// credentials; nil in development mode.
func (s *Server) verifyToken() tokenVerifier {
	a := s.auth()
	if a.Dev() {
		return nil
	}
	return func(tok string) (string, *principal.Principal, error) {
		t, _, p, err := a.resolve(tok)
		return t, p, err
	}
}

// adminRoutes mounts the operators' routes on r.
func (s *Server) adminRoutes(r chi.Router) {
	r.Get("/readyz", s.ready.handle)
	r.Method(http.MethodGet, "/metrics", newScrapeCache(s.cfg.Registry, s.cfg.MetricsCacheTTL, s.cfg.MaxMetricsScrapes))
}

// Handler is the gateway's HTTP handler.
func (s *Server) Handler() http.Handler { return s.router }

// AdminHandler is the handler of the admin listener with SeparateAdmin:
// /healthz, /readyz, /metrics and Go's profiler under /debug/pprof/. No
// credential is asked: bind it where only operators reach it.
func (s *Server) AdminHandler() http.Handler {
	r := chi.NewRouter()
	r.Use(s.recoverer)
	r.Get("/healthz", handleHealthz)
	s.adminRoutes(r)
	r.HandleFunc("/debug/pprof/*", pprof.Index)
	r.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	r.HandleFunc("/debug/pprof/profile", pprof.Profile)
	r.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	r.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return r
}

// Start begins the background broker probe. It is idempotent.
func (s *Server) Start() { s.startOnce.Do(s.ready.start) }

// Drain marks the server not ready, so load balancers stop sending new
// work while in-flight requests finish.
func (s *Server) Drain() { s.ready.draining.Store(true) }

// Shutdown stops the server's background work and waits for it, or returns
// ctx.Err() if ctx ends first. In-flight HTTP requests are the http.Server's
// to drain (http.Server.Shutdown), before this is called. It is idempotent.
func (s *Server) Shutdown(ctx context.Context) error {
	s.Drain()
	done := make(chan struct{})
	go func() {
		s.shutdownOnce.Do(func() {
			s.Start() // a never-started probe must still be stoppable
			s.ready.stop()
		})
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Server) topicName(r *http.Request) string {
	return s.cfg.Naming.Events(TenantFrom(r.Context()))
}

// recoverer turns a panic in a handler into a 500 and a logged error: a bug
// must cost one request, not the process.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error().Interface("panic", v).Str("path", r.URL.Path).Str("request_id", RequestIDFrom(r.Context())).Msg("handler panicked")
				writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "internal"})
			}
		}()
		next.ServeHTTP(w, r)
	})
}
