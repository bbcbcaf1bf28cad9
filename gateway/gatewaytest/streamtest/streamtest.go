// Package streamtest serves a gatewaytest.Stack with the streaming bindings
// mounted as cmd/aep-gateway mounts them (dialect D SSE, WebSocket and
// durable subscriptions; dialect R SSE and WebSocket), for tests of clients
// of the public API (cmd/aepctl, gateway/console). It is for tests only.
// When the streaming packages move, this is the one place their tests'
// wiring changes.
package streamtest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/dialectd"
	"github.com/aep-gateway/aep-gateway/gateway/dialectr"
	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// Stack is a served gateway with streaming.
type Stack struct {
	*gatewaytest.Stack
	URL     string // the httptest server's base URL
	Engine  *engine.Engine
	Durable *durable.Cluster
	Hub     *transport.Hub // admits every stream; Shutdown ends them all
	Relay   *dialectr.Relay
}

// New builds the stack, calls mount (when not nil) so the caller can mount
// more handlers, and serves it; everything is closed by tb.Cleanup.
func New(tb testing.TB, o gatewaytest.Options, mount func(*gateway.Server)) *Stack {
	tb.Helper()
	st := gatewaytest.New(tb, o)
	st.Server.Start()
	log := zerolog.New(io.Discard)
	opts := []kgo.Opt{st.Seeds, kgo.FetchMaxWait(100 * time.Millisecond)}
	eng, err := engine.NewEngine(engine.Config{ClientOpts: opts, Topics: st.Provisioner, Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	dc, err := durable.New(durable.Config{ClientOpts: opts, Logger: log}, eng)
	if err != nil {
		eng.Close()
		tb.Fatal(err)
	}
	srv := st.Server
	hub := transport.NewHub(0)
	srv.MountMethod(aep.DialectD, http.MethodGet, "/aep/events", dialectd.NewSSEHandler(eng, st.Keyring, dialectd.SSEConfig{Hub: hub, Logger: log}))
	srv.Mount(aep.DialectD, "/aep", dialectd.NewWSHandler(eng, dc, st.Keyring, srv.IngestFunc(aep.DialectD), dialectd.WSConfig{Hub: hub, Logger: log}))
	subs := dialectd.NewSubscriptionsHandler(dc, st.Keyring, dialectd.SubscriptionsConfig{Hub: hub, Logger: log})
	srv.Mount(aep.DialectD, "/aep/subscriptions", subs)
	srv.Mount(aep.DialectD, "/aep/subscriptions/*", subs)
	srv.Mount(aep.DialectD, "/aep/dead-letters", dialectd.NewDeadLettersHandler(dc, 0, log))
	rl, err := dialectr.New(dialectr.Config{Engine: eng, Ingest: srv.IngestFunc(aep.DialectR), Hub: hub, ClientOpts: opts, Topics: st.Provisioner,
		Index: cursor.IndexerConfig{Distance: 4, Every: 3}, Logger: log})
	if err != nil {
		dc.Close()
		eng.Close()
		tb.Fatal(err)
	}
	srv.Mount(aep.DialectR, "/stream", rl.Stream())
	srv.Mount(aep.DialectR, "/socket", rl.Socket())
	if mount != nil {
		mount(srv)
	}
	hs := httptest.NewServer(srv.Handler())
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hub.Shutdown(ctx)
		_ = rl.Shutdown(ctx)
		hs.CloseClientConnections()
		hs.Close()
		dc.Close()
		eng.Close()
	})
	return &Stack{Stack: st, URL: hs.URL, Engine: eng, Durable: dc, Hub: hub, Relay: rl}
}
