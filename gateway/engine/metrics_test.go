package engine_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// A stalled best_effort subscriber: what was queued counts as delivered,
// the rest as dropped, and the two add up to what was produced.
func TestEngineMetrics(t *testing.T) {
	st := gatewaytest.New(t, gatewaytest.Options{Partitions: 1})
	reg := prometheus.NewRegistry()
	eng, err := engine.NewEngine(engine.Config{ClientOpts: []kgo.Opt{st.Seeds, kgo.FetchMaxWait(100 * time.Millisecond)},
		Topics: st.Provisioner, Registerer: reg, Logger: zerolog.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f, err := filtering.ParseD([]byte(`{"types":"*"}`))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := eng.Subscribe(ctx, engine.Request{Tenant: tenant.MustParse(gateway.DevTenant), Filter: f, Queue: 2})
	if err != nil {
		t.Fatal(err)
	}
	if v := gauge(t, reg, "aep_delivery_subscriptions"); v != 1 {
		t.Fatalf("open subscriptions %v", v)
	}
	const n = 20
	for i := 0; i < n; i++ {
		a := aep.Attrs{Dialect: aep.DialectD, ID: fmt.Sprintf("evt_%d", i), Type: "task.progress", Source: "agent:a", Session: "s"}
		rec := &kgo.Record{Topic: partitioning.Naming{}.Events(gateway.DevTenant), Key: []byte("s"), Value: []byte(`{}`),
			Headers: partitioning.AppendHeaders(nil, &a)}
		if err := st.Client.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var d, x float64
	if !gatewaytest.Eventually(20*time.Second, 10*time.Millisecond, func() bool {
		d, x = gauge(t, reg, "aep_delivery_events_total"), gauge(t, reg, "aep_delivery_dropped_total")
		return d+x == n
	}) {
		t.Fatalf("delivered %v + dropped %v never reached %d", d, x, n)
	}
	if d != 2 || x != n-2 {
		t.Fatalf("delivered %v dropped %v with a queue of 2", d, x)
	}
	sub.Close()
	if v := gauge(t, reg, "aep_delivery_subscriptions"); v != 0 {
		t.Fatalf("open subscriptions after close %v", v)
	}
}
