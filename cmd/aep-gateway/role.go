package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/filterworker"
	"github.com/aep-gateway/aep-gateway/gateway/forward"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// Values of --role.
const (
	roleGateway = "gateway"
	roleWorker  = "filter-worker"
	roleAll     = "all"
)

// liveTopics are the registry and delivery topics of --live-delivery
// workers.
func (c config) liveTopics() forward.Topics {
	return forward.Topics{
		Registry: c.LiveRegistryTopic, Delivery: c.LiveDeliveryTopic,
		DeliveryPartitions: int32(c.LiveDeliveryPartitions), ReplicationFactor: int16(c.TopicReplicationFactor),
	}.WithDefaults()
}

// forwardConfig is the engine's side of --live-delivery workers; st
// remembers how the last provisioning of its topics went, for /readyz.
func (c config) forwardConfig(adm *kadm.Client, st *provisionStatus) (engine.LiveDelivery, engine.ForwardConfig) {
	mode, _ := engine.ParseLiveDelivery(c.LiveDelivery) // validated by parseConfig
	t := c.liveTopics()
	return mode, engine.ForwardConfig{RegistryTopic: t.Registry, DeliveryTopic: t.Delivery,
		Ensure: func(ctx context.Context) error { return st.record(t.Ensure(ctx, adm)) }}
}

// provisionStatus is the outcome of the last provisioning of the workers
// mode's topics (a gateway.ProvisioningReporter): /readyz answers 503
// naming the cause until a later attempt succeeds.
type provisionStatus struct{ err atomic.Pointer[error] }

func (p *provisionStatus) record(err error) error {
	if err == nil {
		p.err.Store(nil)
	} else {
		p.err.Store(&err)
	}
	return err
}

func (p *provisionStatus) LastError() error {
	if e := p.err.Load(); e != nil {
		return *e
	}
	return nil
}

// startFilterWorker runs a filter worker until lc stops it; the channel
// yields its error if it stops by itself (the process should then exit:
// its partitions go to the other workers from the committed offsets).
func startFilterWorker(cfg config, opts []kgo.Opt, naming partitioning.Naming, adm *kadm.Client,
	reg prometheus.Registerer, log zerolog.Logger, lc *lifecycle) (<-chan error, error) {
	t := cfg.liveTopics()
	w, err := filterworker.New(filterworker.Config{
		ClientOpts: opts, Naming: naming, RegistryTopic: t.Registry, DeliveryTopic: t.Delivery,
		Group: cfg.FilterWorkerGroup, Logger: log, Registerer: reg,
		Ensure: func(ctx context.Context) error { return t.Ensure(ctx, adm) },
	})
	if err != nil {
		return nil, err
	}
	failed := runOwned("filter worker", w.Run, lc)
	log.Info().Str("group", cfg.FilterWorkerGroup).Str("registry", t.Registry).Str("delivery", t.Delivery).Msg("filter worker started")
	return failed, nil
}

// runOwned runs run until lc stops it (cancelling its context and waiting
// for it); the channel yields run's error if it stops by itself, the
// process then exits.
func runOwned(name string, run func(context.Context) error, lc *lifecycle) <-chan error {
	ctx, cancel := context.WithCancel(context.Background())
	done, failed := make(chan error, 1), make(chan error, 1)
	go func() {
		err := run(ctx)
		if err != nil && ctx.Err() == nil {
			failed <- err
		}
		done <- err
	}()
	lc.add(name, func(sctx context.Context) error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-sctx.Done():
			return sctx.Err()
		}
	})
	return failed
}

// serveBackground is --role filter-worker and --role sealer: the worker
// (started by the caller), and /metrics, /healthz and /readyz on --listen,
// until ctx ends or the worker fails.
func serveBackground(ctx context.Context, cfg config, role string, failed <-chan error, reg *prometheus.Registry, log zerolog.Logger, lc *lifecycle, stopSignals func()) error {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	var workerErr error
	stopped := make(chan struct{})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-stopped:
			http.Error(w, fmt.Sprintf("%s stopped: %v", role, workerErr), http.StatusServiceUnavailable)
		default:
			_, _ = w.Write([]byte("ok\n"))
		}
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	lc.add("http server", func(ctx context.Context) error {
		err := hs.Shutdown(ctx)
		<-serveErr //nolint:errcheck // Serve's http.ErrServerClosed: Shutdown's error is the one to report
		return err
	})
	log.Info().Str("listen", "http://"+ln.Addr().String()).Str("role", role).Msg("aep-gateway serving")
	select {
	case workerErr = <-failed:
		close(stopped)
		log.Error().Err(workerErr).Str("role", role).Msg("worker stopped")
	case err := <-serveErr:
		serveErr <- err
		workerErr = fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	stopSignals()
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	return errors.Join(workerErr, lc.stop(sctx))
}
