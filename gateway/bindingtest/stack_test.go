package bindingtest

// This file is the suite's only Go-level coupling to the binding packages:
// everything else speaks HTTP and WebSocket to the served stack. It mounts
// the four streaming bindings as cmd/aep-gateway/main.go does and shuts
// them down in main's order.

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/dialectd"
	"github.com/aep-gateway/aep-gateway/gateway/dialectr"
	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/filterworker"
	"github.com/aep-gateway/aep-gateway/gateway/forward"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// stackConfig tunes the bindings; zero fields keep their defaults.
type stackConfig struct {
	Heartbeat time.Duration // SSE heartbeats, WebSocket pings (D: control frames, R: ping frames)
	Queue     int           // every subscription's queue
	Outbound  int           // every WebSocket connection's outbound queue
	Batch     int           // SSE-D messages per write
	// WriteTimeout bounds each write to a client in every binding.
	WriteTimeout time.Duration
	// Sockets, when set, gives its clients' server-side sockets small
	// send buffers.
	Sockets *gatewaytest.SmallSockets
	// NoWorker: in workers mode, run no filter worker (the node's
	// subscriptions read their topic themselves).
	NoWorker bool
}

// stack is a gateway on kfake with the four streaming bindings served on a
// real socket at URL.
type stack struct {
	*gatewaytest.Stack
	URL string

	rl       *dialectr.Relay
	stopOnce sync.Once
	stopErr  error
	stop     func(context.Context) error
}

// partitions of the tenant topic in the suite's stacks.
const partitions = 4

func newStack(t *testing.T, mode engine.LiveDelivery, c stackConfig) *stack {
	t.Helper()
	log := zerolog.New(io.Discard)
	reg := prometheus.NewRegistry()
	st := gatewaytest.New(t, gatewaytest.Options{Partitions: partitions, Config: func(g *gateway.Config) { g.Registry = reg }})
	srv := st.Server
	srv.Start()
	opts := []kgo.Opt{st.Seeds, kgo.FetchMaxWait(100 * time.Millisecond)}
	ecfg := engine.Config{ClientOpts: opts, Topics: st.Provisioner, Registerer: reg, Logger: log}
	if mode == engine.LiveWorkers {
		ecfg.LiveDelivery, ecfg.NodeID = mode, "node-1"
		ecfg.Forward = engine.ForwardConfig{Ensure: startWorker(t, st, opts, !c.NoWorker)}
	}
	eng, err := engine.NewEngine(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := durable.New(durable.Config{ClientOpts: opts, Registerer: reg, Logger: log}, eng)
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	hub := transport.NewHub(0) // as main: one Hub admits every stream
	srv.MountMethod(aep.DialectD, http.MethodGet, "/aep/events", dialectd.NewSSEHandler(eng, st.Keyring,
		dialectd.SSEConfig{Heartbeat: c.Heartbeat, WriteTimeout: c.WriteTimeout, Queue: c.Queue, Batch: c.Batch, Hub: hub, Logger: log}))
	srv.Mount(aep.DialectD, "/aep", dialectd.NewWSHandler(eng, dc, st.Keyring, srv.IngestFunc(aep.DialectD),
		dialectd.WSConfig{Heartbeat: c.Heartbeat, WriteTimeout: c.WriteTimeout, Queue: c.Queue, Outbound: c.Outbound, Hub: hub, Logger: log}))
	rl, err := dialectr.New(dialectr.Config{
		Engine: eng, Ingest: srv.IngestFunc(aep.DialectR), Hub: hub, ClientOpts: opts, Topics: st.Provisioner,
		Index: cursor.IndexerConfig{Distance: 4, Every: 3},
		Ping:  c.Heartbeat, WriteTimeout: c.WriteTimeout, Queue: c.Queue, Outbound: c.Outbound, ReplayBuffer: 1000, Logger: log,
	})
	if err != nil {
		dc.Close()
		eng.Close()
		t.Fatal(err)
	}
	srv.Mount(aep.DialectR, "/stream", rl.Stream())
	srv.Mount(aep.DialectR, "/socket", rl.Socket())
	srv.AdvertiseR(map[string]string{"stream": "/stream", "socket": "/socket"}, rl.Capabilities())

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if c.Sockets != nil {
		ln = c.Sockets.Listener(ln)
	}
	httpSrv := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	// As main: the Hub ends every stream when shutdown starts.
	httpSrv.RegisterOnShutdown(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hub.Shutdown(ctx)
	})
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(ln) }()
	s := &stack{Stack: st, URL: "http://" + ln.Addr().String(), rl: rl}
	// main's shutdown order after the signal: the components in reverse
	// order of their start.
	s.stop = func(ctx context.Context) error {
		srv.Drain()
		err := httpSrv.Shutdown(ctx)
		if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		hubErr := hub.Shutdown(ctx)
		rlErr := rl.Shutdown(ctx)
		dc.Close()
		eng.Close()
		return errors.Join(err, hubErr, rlErr, srv.Shutdown(ctx))
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		_ = httpSrv.Close()
		dc.Close()
		eng.Close()
	})
	return s
}

// startWorker runs a filter worker on st's cluster until t ends (as
// --role all does), unless run is false, and returns the provisioning of
// the workers-mode topics for the node's ForwardConfig. The tenant topic
// is created first, so the worker reads it from its start (a worker finds
// a new tenant topic only within its metadata age, 10s: the case of
// streams the workers have not answered is TestResumeBeforeWorkersAnswer's).
func startWorker(t *testing.T, st *gatewaytest.Stack, opts []kgo.Opt, run bool) func(context.Context) error {
	t.Helper()
	topics := forward.Topics{DeliveryPartitions: 2, ReplicationFactor: 1}
	ensure := func(ctx context.Context) error { return topics.Ensure(ctx, st.Admin) }
	if !run {
		return ensure
	}
	if _, err := st.Provisioner.Ensure(context.Background(), gateway.DevTenant); err != nil {
		t.Fatal(err)
	}
	w, err := filterworker.New(filterworker.Config{ClientOpts: opts, Naming: st.Provisioner.Naming(),
		Ensure: ensure, Logger: zerolog.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("filter worker: %v", err)
		}
	})
	return ensure
}

// shutdown runs main's shutdown steps once; later calls return the first
// call's error.
func (s *stack) shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() { s.stopErr = s.stop(ctx) })
	return s.stopErr
}

// waitIndexed polls until the R index of the dev tenant covers partition p
// below offset and the resolver has read it: resumes then resolve positions
// from the index (how they see what retention deleted).
func (s *stack) waitIndexed(t *testing.T, p int32, offset int64) {
	t.Helper()
	gatewaytest.Poll(t, "the R index to cover the partition", func() bool {
		x, ok := s.rl.Indexed(gateway.DevTenant, p)
		return ok && x >= offset
	})
	gatewaytest.Poll(t, "the R resolver to read the index", func() bool {
		ok, err := s.rl.IndexCaughtUp(context.Background(), gateway.DevTenant)
		return err == nil && ok
	})
}
