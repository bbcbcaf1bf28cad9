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
	"github.com/aep-gateway/aep-gateway/gateway/delivery"
	"github.com/aep-gateway/aep-gateway/gateway/relay"
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
	log := newLogger(cfg, stderr)
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
// drains: it stops accepting, lets in-flight requests finish their Kafka
// writes, flushes the producer, and stops the broker. A second signal exits
// at once (signal.NotifyContext's stop restores the default handler).
func serve(ctx context.Context, cfg config, log zerolog.Logger, stopSignals func()) error {
	seeds := cfg.brokers()
	var embedded *embeddedBroker
	if cfg.embedded() {
		var err error
		embedded, err = startEmbedded(cfg, log)
		if err != nil {
			return err
		}
		defer embedded.Close()
		seeds = []string{embedded.Addr()}
		cfg.TopicReplicationFactor = 1
		log.Info().Str("kafka", embedded.Addr()).Str("data_dir", cfg.DataDir).
			Msg("embedded Kafka-protocol broker started; point any Kafka tool at this address")
	}

	opts, err := kafkaOpts(cfg, seeds, log)
	if err != nil {
		return err
	}
	prodOpts := append(append([]kgo.Opt{}, opts...), gateway.NewProducerOpts(cfg.MaxEventBytes, cfg.WriteTimeout)...)
	producer, err := kgo.NewClient(prodOpts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer producer.Close()

	naming := partitioning.Naming{Template: cfg.TopicTemplate}
	prov, err := partitioning.NewProvisioner(kadm.NewClient(producer), naming, partitioning.TopicConfig{
		Partitions:        int32(cfg.TopicPartitions),
		ReplicationFactor: int16(cfg.TopicReplicationFactor),
		Retention:         cfg.TopicRetention,
		RetentionBytes:    cfg.TopicRetentionBytes,
	})
	if err != nil {
		return err
	}

	keys, jwt, err := loadAuth(cfg)
	if err != nil {
		return err
	}
	reloader := startAuthReloader(cfg, keys, jwt, log)
	defer reloader.Close()
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
	deps := gateway.Deps{Topics: prov, Writer: gateway.KafkaWriter{Client: producer}, Pinger: producer}
	if embedded != nil {
		deps.Auditor = embedded
		deps.Pinger = pingAll{producer, embedded} // /readyz sees a broker that stopped accepting
	}
	// One registry serves /metrics for the gateway and the delivery engine.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := gateway.New(gateway.Config{
		Registry: reg,
		Limits: gateway.Limits{
			MaxBodyBytes: cfg.MaxBodyBytes, MaxEventBytes: cfg.MaxEventBytes, MaxBatchEvents: cfg.MaxBatchEvents,
		},
		Keys: keys, JWT: jwt, Naming: naming, KeyStrategy: ks, WriteTimeout: cfg.WriteTimeout, Logger: log,
		RateLimit:   gateway.RateLimit{EventsPerSecond: cfg.RateLimit, Burst: cfg.RateBurst},
		ReadTimeout: cfg.ReadTimeout, MaxInflightBytesPerTenant: cfg.MaxInflightBytesPerTenant,
		DevAnyHost: cfg.AllowUnauthenticated, CORSOrigins: cfg.corsOrigins(),
	}, deps)
	if err != nil {
		return err
	}
	srv.Start()

	// Delivery: the engine reads tenant topics and feeds the streaming
	// bindings mounted on the server.
	keyring, err := loadCursorKeys(cfg, log)
	if err != nil {
		return err
	}
	engine, err := delivery.NewEngine(delivery.Config{ClientOpts: opts, Naming: naming, Topics: prov, Registerer: reg, Logger: log})
	if err != nil {
		return err
	}
	defer engine.Close()
	tenantOf := func(r *http.Request) string { return gateway.TenantFrom(r.Context()) }
	srv.MountMethod(aep.DialectD, http.MethodGet, "/aep/events",
		delivery.NewSSEHandlerD(engine, keyring, tenantOf, delivery.SSEConfig{Logger: log}))
	wsD := delivery.NewWSHandlerD(engine, keyring,
		func(ctx context.Context, tenant string, events [][]byte) []gateway.IngestResult {
			return srv.Ingest(ctx, tenant, aep.DialectD, events)
		}, tenantOf, delivery.WSConfigD{MaxMessageBytes: cfg.MaxEventBytes, Logger: log,
			OriginPatterns: gateway.WebSocketOriginPatterns(cfg.corsOrigins())})
	srv.Mount(aep.DialectD, "/aep", wsD)
	// Durable at_least_once subscriptions (docs/delivery-durable-d.md); their
	// streams end with the engine at shutdown start.
	subsD := delivery.NewSubscriptionsHandlerD(engine, keyring, tenantOf,
		delivery.SubsConfigD{MaxBodyBytes: cfg.MaxBodyBytes, Logger: log})
	srv.Mount(aep.DialectD, "/aep/subscriptions", subsD)
	srv.Mount(aep.DialectD, "/aep/subscriptions/*", subsD)

	// Dialect R streaming (AEP-0003 SSE and WebSocket) with exact resume
	// through the per-tenant session index (docs/relay.md).
	rl, err := relay.New(relay.Config{
		Engine: engine, Server: srv, ClientOpts: opts, Naming: naming, Topics: prov,
		Limits: aep.Limits{MaxEventBytes: cfg.MaxEventBytes}, ReplayBuffer: cfg.ReplayBuffer,
		MaxStreamsPerTenant: cfg.MaxStreamsPerTenant, Logger: log,
		OriginPatterns: gateway.WebSocketOriginPatterns(cfg.corsOrigins()),
	})
	if err != nil {
		return err
	}
	defer rl.Close()
	srv.Mount(aep.DialectR, "/stream", rl.Stream())
	srv.Mount(aep.DialectR, "/socket", rl.Socket())
	srv.AdvertiseR(map[string]string{"stream": "/stream", "socket": "/socket"}, rl.Capabilities())

	ln, err := listenHTTP(cfg, reg, log)
	if err != nil {
		return err
	}
	httpSrv := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
	// Streams never go idle: end them when shutdown starts, so that
	// Shutdown only waits for in-flight ingest requests.
	httpSrv.RegisterOnShutdown(engine.Close)
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(ln) }()
	log.Info().Str("listen", "http://"+ln.Addr().String()).Str("kafka", strings.Join(seeds, ",")).
		Str("topic_template", cfg.TopicTemplate).Msg("aep-gateway serving")

	select {
	case err := <-serveErr:
		_ = srv.Shutdown(context.Background())
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	stopSignals() // a second signal now kills the process
	log.Info().Dur("timeout", cfg.ShutdownTimeout).Msg("shutting down: draining in-flight requests")
	srv.Drain()
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	rl.Close() // R streams get their closing comment/frame with positions
	// http.Server.Shutdown does not track hijacked (WebSocket) connections.
	wsErr := wsD.Shutdown(sctx)
	err = httpSrv.Shutdown(sctx)
	if err == nil {
		err = wsErr
	}
	<-serveErr
	if serr := srv.Shutdown(sctx); err == nil {
		err = serr
	}
	if ferr := producer.Flush(sctx); err == nil {
		err = ferr
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info().Msg("aep-gateway stopped")
	return nil
}
