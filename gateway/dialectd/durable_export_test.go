package dialectd

import (
	"io"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
)

// NewTestDurable starts the durable cluster of a test node on eng (opts
// reach eng's brokers; its metrics go to reg when not nil); tb.Cleanup
// closes it, before eng when eng's Cleanup was registered first.
func NewTestDurable(tb testing.TB, eng *engine.Engine, reg prometheus.Registerer, opts ...kgo.Opt) *durable.Cluster {
	tb.Helper()
	dc, err := durable.New(durable.Config{ClientOpts: opts, Registerer: reg, Logger: zerolog.New(io.Discard)}, eng)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(dc.Close)
	return dc
}
