// Command aep-gateway is the server: a Kafka-backed, durable event gateway for
// the Agent Event Protocol. Run it with --help for its flags.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/console"
	"github.com/aep-gateway/aep-gateway/gateway/dialectd"
	"github.com/aep-gateway/aep-gateway/gateway/dialectr"
	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/filterworker"
	"github.com/aep-gateway/aep-gateway/gateway/ingest/dedup"
	"github.com/aep-gateway/aep-gateway/gateway/tasks"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/internal/tracing"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "aep-gateway:", err)
		return 2
	}
	if cfg.ShowVersion {
		fmt.Fprintln(stdout, versionLine())
		return 0
	}
	log := newLogger(cfg, stderr)
	for _, name := range cfg.UnknownEnv {
		log.Warn().Str("variable", name).Msg("unknown AEP_ environment variable ignored: no flag has this name (see --help)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, cfg, log, stop); err != nil {
		log.Error().Err(err).Msg("aep-gateway stopped with an error")
		return 1
	}
	return 0
}

// loadAuth reads the API key file and the JWT key, whichever are configured.
func loadAuth(cfg config) (*gateway.KeyStore, *gateway.JWTVerifier, error) {
	var keys *gateway.KeyStore
	if cfg.APIKeys != "" {
		var err error
		if keys, err = gateway.LoadKeyStore(cfg.APIKeys); err != nil {
			return nil, nil, err
		}
	}
	var jwt *gateway.JWTVerifier
	switch {
	case cfg.JWTSecretFile != "":
		secret, err := os.ReadFile(cfg.JWTSecretFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--jwt-hs256-secret-file: %w", err)
		}
		if jwt, err = gateway.NewJWTVerifierHMAC(bytes.TrimSpace(secret)); err != nil {
			return nil, nil, err
		}
	case cfg.JWTJWKSURL != "" || cfg.JWTJWKSFile != "":
		set, err := loadJWKS(cfg)
		if err != nil {
			return nil, nil, err
		}
		jwt = gateway.NewJWTVerifierJWKS(set)
	case cfg.JWTPublicKey != "":
		pemBytes, err := os.ReadFile(cfg.JWTPublicKey)
		if err != nil {
			return nil, nil, fmt.Errorf("--jwt-public-key: %w", err)
		}
		if jwt, err = gateway.NewJWTVerifierPEM(pemBytes); err != nil {
			return nil, nil, err
		}
	}
	if jwt != nil {
		jwt.TenantClaim, jwt.Issuer, jwt.Audience, jwt.Leeway = cfg.JWTTenantClaim, cfg.JWTIssuer, cfg.JWTAudience, cfg.JWTLeeway
	}
	return keys, jwt, nil
}

// logTimeFormat is RFC 3339 with milliseconds, in UTC.
const logTimeFormat = "2006-01-02T15:04:05.000Z07:00"

func init() {
	zerolog.TimeFieldFormat = logTimeFormat
	zerolog.TimestampFunc = func() time.Time { return time.Now().UTC() }
}

func newLogger(cfg config, w io.Writer) zerolog.Logger {
	if cfg.LogFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	}
	lvl, err := zerolog.ParseLevel(cfg.LogLevel)
	if err != nil || lvl == zerolog.NoLevel {
		lvl = zerolog.InfoLevel
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

// serve runs the gateway until ctx ends (the first SIGINT/SIGTERM), then
// stops its components in the reverse order of their start, all within
// --shutdown-timeout: the HTTP server stops accepting and ends every stream
// (each with its dialect's last words) while in-flight requests finish
// their Kafka writes; then the relay's indexers, the delivery engine, the
// readiness probe, the producer (flushed) and the broker. A second signal
// exits at once (signal.NotifyContext's stop restores the default handler).
func serve(ctx context.Context, cfg config, log zerolog.Logger, stopSignals func()) error {
	lc := &lifecycle{log: log}
	// Whatever returns early stops what had started.
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		_ = lc.stop(sctx)
	}()
	seeds := cfg.brokers()
	var embedded *embeddedBroker
	if cfg.embedded() {
		var err error
		embedded, err = startEmbedded(cfg, log)
		if err != nil {
			return err
		}
		lc.adds("embedded broker", embedded.Close)
		seeds = []string{embedded.Addr()}
		cfg.TopicReplicationFactor = 1
		log.Info().Str("kafka", embedded.Addr()).Str("data_dir", cfg.DataDir).
			Msg("embedded Kafka-protocol broker started; point any Kafka tool at this address")
		cfg.logEmbeddedBounds(log)
	}

	// Tracing first, so that every Kafka client gets its hooks, and
	// stopped last, so that the spans of the shutdown are flushed.
	ver, rev, _ := buildInfo()
	stopTracing, err := tracing.Setup(ctx, tracing.Config{
		Endpoint: cfg.otlpEndpoint(), ServiceName: cfg.OTelServiceName, ServiceVersion: ver, SampleRatio: cfg.TraceSampleRatio,
		Logger: log,
	})
	if err != nil {
		return err
	}
	lc.add("tracing", stopTracing)
	if tracing.On() {
		log.Info().Str("otlp_endpoint", cfg.otlpEndpoint()).Float64("sample_ratio", cfg.TraceSampleRatio).Msg("OpenTelemetry tracing on")
	}

	// One registry serves /metrics for the gateway, the delivery engine, the
	// Kafka clients (kprom) and the build info.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), newBuildInfoGauge())
	kmetrics := newKafkaClientMetrics(reg)

	opts, err := kafkaOpts(cfg, seeds, log)
	if err != nil {
		return err
	}
	prodOpts := append(append([]kgo.Opt{}, opts...), gateway.NewProducerOpts(cfg.MaxEventBytes, cfg.WriteTimeout)...)
	prodOpts = append(append(prodOpts, kmetrics.producer), tracing.KafkaHooks()...)
	opts = append(opts, kmetrics.consumer) // every other client: delivery, relay, cursors
	producer, err := kgo.NewClient(prodOpts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	lc.add("producer", func(ctx context.Context) error {
		err := producer.Flush(ctx)
		producer.Close()
		return err
	})

	naming := partitioning.Naming{Template: cfg.TopicTemplate}
	prov, err := partitioning.NewProvisioner(kadm.NewClient(producer), naming, cfg.topicConfig(log))
	if err != nil {
		return err
	}
	reg.MustRegister(newTopicCheckCollector(prov))
	var workerFailed <-chan error
	if cfg.Role == roleWorker || cfg.Role == roleAll {
		if workerFailed, err = startFilterWorker(cfg, opts, naming, kadm.NewClient(producer), reg, log, lc); err != nil {
			return err
		}
		if cfg.Role == roleWorker {
			return serveBackground(ctx, cfg, roleWorker, workerFailed, reg, log, lc, stopSignals)
		}
	}
	signer, auditKeyDoc, err := auditKeys(cfg, log)
	if err != nil {
		return err
	}
	var sealerFailed <-chan error
	if cfg.sealHere() {
		if sealerFailed, err = startSealer(cfg, opts, naming, signer, auditKeyDoc, reg, log, lc); err != nil {
			return err
		}
		if cfg.Role == roleSealer {
			return serveBackground(ctx, cfg, roleSealer, sealerFailed, reg, log, lc, stopSignals)
		}
	}
	var bridgeFailed <-chan error
	if cfg.bridgeHere() {
		if bridgeFailed, err = startBridges(cfg, opts, naming, reg, log, lc); err != nil {
			return err
		}
		if cfg.Role == roleBridge {
			return serveBackground(ctx, cfg, roleBridge, bridgeFailed, reg, log, lc, stopSignals)
		}
	}

	var tasksFailed <-chan error
	if cfg.TaskStates {
		tw, err := tasks.New(tasks.Config{ClientOpts: opts, TopicRegexp: filterworker.TopicRegexp(naming), Group: cfg.TaskStatesGroup,
			Logger: log, Registerer: reg})
		if err != nil {
			return err
		}
		tasksFailed = runOwned("task-state worker", tw.Run, lc)
	}

	keys, jwt, err := loadAuth(cfg)
	if err != nil {
		return err
	}
	// Cursor keys and the TLS certificate reload like the credentials.
	keyring, err := loadCursorKeys(cfg, log)
	if err != nil {
		return err
	}
	certs, err := loadTLS(cfg)
	if err != nil {
		return err
	}
	reloader := startAuthReloader(cfg, reloadable{keys: keys, jwt: jwt, cursors: keyring, certs: certs}, log, reg)
	lc.adds("auth reloader", reloader.Close)
	if keys != nil {
		log.Info().Int("keys", keys.Len()).Msg("API keys loaded")
	}
	if jwt != nil {
		log.Info().Str("tenant_claim", cfg.JWTTenantClaim).Msg("JWT bearer tokens accepted")
	}
	if cfg.dev() {
		log.Warn().Str("tenant", gateway.DevTenant).Str("listen", cfg.Listen).
			Msg("DEVELOPMENT MODE: no --api-keys and no JWT key, every request is accepted without authentication as tenant \"default\"; never expose this listener")
	}
	ks, _ := partitioning.ParseKeyStrategy(cfg.KeyStrategy)
	liveTopics := &provisionStatus{} // the workers mode's topics, created on first use
	// Every stream of every binding is admitted by one Hub: one per-tenant
	// cap, and one shutdown that ends them all. A failure of its poller
	// (parked streams) makes /readyz answer 503.
	hub := transport.NewHub(cfg.MaxStreamsPerTenant)
	hub.SetParking(cfg.ParkIdleStreams)
	hub.SetLogger(log)
	deps := gateway.Deps{Topics: prov, Writer: gateway.KafkaWriter{Client: producer}, Pinger: producer,
		Provisioning: []gateway.ProvisioningReporter{liveTopics},
		Checks:       []gateway.ReadinessCheck{{Name: "poller", Err: hub.PollerErr}}}
	if embedded != nil {
		deps.Auditor = embedded
		deps.Pinger = pingAll{producer, embedded}               // /readyz sees a broker that stopped accepting
		deps.Provisioning = append(deps.Provisioning, embedded) // damage found on disk at start
		reg.MustRegister(embedded.damageMetrics()...)
	}
	srv, err := gateway.New(gateway.Config{
		AuditKeys: auditKeyDoc,
		Registry:  reg,
		Limits: gateway.Limits{
			MaxBodyBytes: cfg.MaxBodyBytes, MaxEventBytes: cfg.MaxEventBytes, MaxBatchEvents: cfg.MaxBatchEvents,
			Event: aep.Limits{ValidatePayloads: cfg.ValidatePayloads},
		},
		Keys: keys, JWT: jwt, Naming: naming, KeyStrategy: ks, WriteTimeout: cfg.WriteTimeout, Logger: log,
		ProduceTimeout: cfg.ProduceTimeout, Dedup: dedup.Config{Max: cfg.DedupMaxEvents, TTL: cfg.DedupWindow},
		RateLimit:   gateway.RateLimit{EventsPerSecond: cfg.RateLimit, Burst: cfg.RateBurst},
		ReadTimeout: cfg.ReadTimeout, MaxInflightBytesPerTenant: cfg.MaxInflightBytesPerTenant,
		DevAnyHost: cfg.AllowUnauthenticated, CORSOrigins: cfg.corsOrigins(),

		AccessLogSampleN: cfg.accessLogSampleN(), // --access-log-sample
		SeparateAdmin:    cfg.AdminListen != "",
	}, deps)
	if err != nil {
		return err
	}
	srv.Start()
	lc.add("gateway", srv.Shutdown)

	// Delivery: the engine reads tenant topics and feeds the streaming
	// bindings mounted on the server.
	engOpts := append(append([]kgo.Opt(nil), opts...), tracing.KafkaHooks()...) // receive spans of delivered records
	liveMode, fwdCfg := cfg.forwardConfig(kadm.NewClient(producer), liveTopics)
	eng, err := engine.NewEngine(engine.Config{
		LiveDelivery: liveMode, Forward: fwdCfg,
		ClientOpts: engOpts, Naming: naming, Topics: prov, Registerer: reg, Logger: log,
		NodeID: cfg.NodeID, MetricsMaxTenants: cfg.MetricsMaxTenants, PartitionCheck: cfg.partitionCheck(),
		MemoryBudget: cfg.MemoryBudget, TenantMemoryBudget: cfg.TenantBudget,
		CatchUpRate: float64(cfg.CatchUpRate), TenantCatchUpRate: float64(cfg.TenantCatchUp),
	})
	if err != nil {
		return err
	}
	lc.adds("delivery engine", eng.Close)
	// The durable cluster (at_least_once streams, journals, dead letters)
	// runs on the engine: added after it, so it stops first.
	dc, err := durable.New(durable.Config{
		ClientOpts: engOpts, Naming: naming, ReplicationFactor: int16(cfg.TopicReplicationFactor),
		Registerer: reg, Logger: log, SubscriptionLagTop: cfg.MetricsSubscriptionLagTop, PartitionCheck: cfg.partitionCheck(),
	}, eng)
	if err != nil {
		return err
	}
	lc.adds("durable cluster", dc.Close)
	reg.MustRegister(hubRefusals(hub)...)
	wsOrigins := gateway.WebSocketOriginPatterns(cfg.corsOrigins())
	srv.Mount(aep.DialectD, "/aep", dialectd.NewWSHandler(eng, dc, keyring, srv.IngestFunc(aep.DialectD),
		dialectd.WSConfig{MaxMessageBytes: cfg.MaxEventBytes, Hub: hub, Logger: log, OriginPatterns: wsOrigins, Registerer: reg,
			ReplayWindow: cfg.TopicRetention}))
	// Durable at_least_once subscriptions (docs/delivery-durable-d.md).
	subsD := dialectd.NewSubscriptionsHandler(dc, keyring,
		dialectd.SubscriptionsConfig{MaxBodyBytes: cfg.MaxBodyBytes, Hub: hub, Logger: log, MaxPerTenant: cfg.MaxDurablePerTenant, AdHocGrace: cfg.AdHocGrace})
	// at_least_once on GET /aep/events: a subscription per stream (docs/delivery.md)
	srv.MountMethod(aep.DialectD, http.MethodGet, "/aep/events",
		dialectd.Events(dialectd.NewSSEHandler(eng, keyring, dialectd.SSEConfig{Hub: hub, Logger: log}), subsD))
	srv.Mount(aep.DialectD, "/aep/subscriptions", subsD)
	srv.Mount(aep.DialectD, "/aep/subscriptions/*", subsD)
	srv.Mount(aep.DialectD, "/aep/dead-letters", dialectd.NewDeadLettersHandler(dc, 0, log))
	srv.Mount(aep.DialectD, "/aep/audit/events/*", dialectd.NewAuditHandler(dc, 0, log))

	controlPolicy, _ := dialectr.ParseControlPolicy(cfg.ControlPolicy) // validated by parseConfig
	// Dialect R streaming (AEP-0003 SSE and WebSocket) with exact resume
	// through the per-tenant session index (docs/relay.md).
	rl, err := dialectr.New(dialectr.Config{
		Engine: eng, Ingest: srv.IngestFunc(aep.DialectR), ClientOpts: opts, Naming: naming, Topics: prov,
		Limits: aep.Limits{MaxEventBytes: cfg.MaxEventBytes}, ReplayBuffer: cfg.ReplayBuffer,
		Hub: hub, Logger: log, OriginPatterns: wsOrigins,
		// AEP-0004 control: only when every request is authenticated.
		Authenticated: !cfg.dev(), ControlPolicy: controlPolicy, NodeID: cfg.NodeID,
		ReplicationFactor: int16(cfg.TopicReplicationFactor), PartitionCheck: cfg.partitionCheck(),
	})
	if err != nil {
		return err
	}
	lc.add("dialect R index", rl.Shutdown)
	lc.add("streams", hub.Shutdown)
	srv.Mount(aep.DialectR, "/stream", rl.Stream())
	srv.Mount(aep.DialectR, "/socket", rl.Socket())
	if cfg.Console {
		srv.Mount(aep.DialectD, "/console/*", http.StripPrefix("/console", console.Handler()))
	}
	srv.AdvertiseR(map[string]string{"stream": "/stream", "socket": "/socket"}, rl.Capabilities())

	ln, err := listenHTTP(cfg, reg, log)
	if err != nil {
		return err
	}
	// added before the public server's stop, so stopped after it: the
	// last scrapes see the drain
	adminAddr, adminFailed, err := serveAdmin(cfg, srv.AdminHandler(), lc)
	if err != nil {
		ln.Close()
		return err
	}
	httpSrv := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
	// Streams never go idle: end them when shutdown starts, so that
	// Shutdown only waits for in-flight requests (and the streams' last
	// words); the "streams" component then waits for the WebSocket
	// connections, which http.Server does not track.
	httpSrv.RegisterOnShutdown(func() {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		_ = hub.Shutdown(sctx)
	})
	scheme := "http"
	if certs != nil {
		if httpSrv.TLSConfig, err = serverTLS(cfg, certs); err != nil {
			ln.Close()
			return err
		}
		scheme = "https"
		log.Info().Time("not_after", certs.NotAfter()).Bool("client_certificates", cfg.TLSClientCA != "").Msg("serving TLS (HTTP/2 and HTTP/1.1)")
	}
	serveErr := make(chan error, 1)
	go func() {
		if certs != nil {
			serveErr <- httpSrv.ServeTLS(ln, "", "") // the certificate comes from TLSConfig
			return
		}
		serveErr <- httpSrv.Serve(ln)
	}()
	lc.add("http server", func(ctx context.Context) error {
		srv.Drain() // /readyz answers 503 from now on
		if cfg.DrainDelay > 0 {
			// Still serving: load balancers polling /readyz take the node
			// out before its listener closes (docs/operations.md).
			log.Info().Dur("drain_delay", cfg.DrainDelay).Msg("draining: /readyz answers 503, still serving")
			t := time.NewTimer(cfg.DrainDelay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		err := httpSrv.Shutdown(ctx)
		<-serveErr //nolint:errcheck // Serve's http.ErrServerClosed: Shutdown's error is the one to report
		return err
	})
	log.Info().Str("version", ver).Str("revision", rev).Str("listen", scheme+"://"+ln.Addr().String()).Str("admin", adminAddr).Str("kafka", strings.Join(seeds, ",")).
		Str("topic_template", cfg.TopicTemplate).Msg("aep-gateway serving")

	var serveFailed error
	select {
	case err := <-serveErr:
		serveErr <- err // for the http server's stop
		serveFailed = fmt.Errorf("http server: %w", err)
	case err := <-workerFailed: // nil channel unless --role all
		serveFailed = fmt.Errorf("filter worker: %w", err)
	case err := <-sealerFailed: // nil channel unless the sealer runs here
		serveFailed = fmt.Errorf("audit sealer: %w", err)
	case err := <-tasksFailed: // nil channel unless the task-state worker runs here
		serveFailed = fmt.Errorf("task-state worker: %w", err)
	case err := <-bridgeFailed: // nil channel unless bridges run here
		serveFailed = fmt.Errorf("bridge: %w", err)
	case err := <-adminFailed: // nil channel without --admin-listen
		serveFailed = fmt.Errorf("admin server: %w", err)
	case <-ctx.Done():
	}
	stopSignals() // a second signal now kills the process
	log.Info().Dur("timeout", cfg.ShutdownTimeout).Dur("drain_delay", cfg.DrainDelay).Msg("shutting down: draining in-flight requests")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.DrainDelay+cfg.ShutdownTimeout)
	defer cancel()
	if err := lc.stop(sctx); err != nil {
		return errors.Join(serveFailed, fmt.Errorf("shutdown: %w", err))
	}
	if serveFailed != nil {
		return serveFailed
	}
	log.Info().Msg("aep-gateway stopped")
	return nil
}
