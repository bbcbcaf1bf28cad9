package durable

import (
	"io"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

const testTenant = "acme"

var testTenantT = tenant.MustParse(testTenant)

// kafkaEnv is the engine tests' kfake environment (gatewaytest.Kafka) for
// the durable cluster's tests.
type kafkaEnv struct {
	t       *testing.T
	g       *gatewaytest.Kafka
	cluster *kfake.Cluster
	prod    *kgo.Client
	topic   string
	parts   int32
}

func newKafkaEnv(t *testing.T, parts int32, opts ...kfake.Opt) *kafkaEnv {
	t.Helper()
	g := gatewaytest.NewKafka(t, testTenant, parts, opts...)
	return &kafkaEnv{t: t, g: g, cluster: g.Cluster, prod: g.Prod, topic: g.Topic, parts: parts}
}

// engine starts a node on the environment: an engine and its durable
// Cluster (what mutate sets of cfg; the engine shares its Registerer),
// both closed by t.Cleanup.
func (k *kafkaEnv) engine(mutate func(*Config)) *Cluster {
	k.t.Helper()
	return newNode(k.t, []kgo.Opt{kgo.SeedBrokers(k.cluster.ListenAddrs()...), kgo.FetchMaxWait(200 * time.Millisecond)}, mutate)
}

func newNode(tb testing.TB, opts []kgo.Opt, mutate func(*Config)) *Cluster {
	tb.Helper()
	cfg := Config{ClientOpts: opts, Logger: zerolog.New(io.Discard)}
	if mutate != nil {
		mutate(&cfg)
	}
	eng, err := engine.NewEngine(engine.Config{ClientOpts: opts, Logger: cfg.Logger, Registerer: cfg.Registerer})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(eng.Close)
	c, err := New(cfg, eng)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close) // before eng.Close
	return c
}

// produce writes one dialect D event of type typ in session sess to
// partition p and returns its offset.
func (k *kafkaEnv) produce(p int32, typ, sess string, n int) int64 {
	k.t.Helper()
	return k.g.ProduceD(k.t, p, typ, sess, n)
}

func mustFilter(t testing.TB, q string) *filtering.Filter { return gatewaytest.FilterD(t, q) }
