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
	"github.com/aep-gateway/aep-gateway/gateway/delivery"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/relay"
)

// Stack is a served gateway with streaming.
type Stack struct {
	*gatewaytest.Stack
	URL string // the httptest server's base URL
}

// New builds the stack, calls mount (when not nil) so the caller can mount
// more handlers, and serves it; everything is closed by tb.Cleanup.
func New(tb testing.TB, o gatewaytest.Options, mount func(*gateway.Server)) *Stack {
	tb.Helper()
	st := gatewaytest.New(tb, o)
	st.Server.Start()
	log := zerolog.New(io.Discard)
	opts := []kgo.Opt{st.Seeds, kgo.FetchMaxWait(100 * time.Millisecond)}
	eng, err := delivery.NewEngine(delivery.Config{ClientOpts: opts, Topics: st.Provisioner, Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	srv := st.Server
	tenantOf := func(r *http.Request) string { return gateway.TenantFrom(r.Context()) }
	srv.MountMethod(aep.DialectD, http.MethodGet, "/aep/events", delivery.NewSSEHandlerD(eng, st.Keyring, tenantOf, delivery.SSEConfig{Logger: log}))
	wsD := delivery.NewWSHandlerD(eng, st.Keyring,
		func(ctx context.Context, tenant string, events [][]byte) []gateway.IngestResult {
			return srv.Ingest(ctx, tenant, aep.DialectD, events)
		}, tenantOf, delivery.WSConfigD{Logger: log})
	srv.Mount(aep.DialectD, "/aep", wsD)
	subs := delivery.NewSubscriptionsHandlerD(eng, st.Keyring, tenantOf, delivery.SubsConfigD{Logger: log})
	srv.Mount(aep.DialectD, "/aep/subscriptions", subs)
	srv.Mount(aep.DialectD, "/aep/subscriptions/*", subs)
	rl, err := relay.New(relay.Config{Engine: eng, Server: srv, ClientOpts: opts, Topics: st.Provisioner,
		Index: cursor.IndexerConfig{Distance: 4, Every: 3}, Logger: log})
	if err != nil {
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
		rl.Close()
		_ = wsD.Shutdown(context.Background())
		hs.CloseClientConnections()
		hs.Close()
		eng.Close()
	})
	return &Stack{Stack: st, URL: hs.URL}
}
