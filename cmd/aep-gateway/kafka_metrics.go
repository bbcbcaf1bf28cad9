package main

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// kafkaClientMetrics are franz-go's client metrics (plugin/kprom) under
// aep_kafka_*, on the gateway's registry, with a client label: "producer"
// for the ingest producer, "consumer" for every client the delivery engine
// and the streaming bindings open.
//
// kprom registers its series when a client is created and unregisters them
// when it closes, so one kprom.Metrics serves one client. The consumers come
// and go (one per durable stream, per catch-up reader, per cursor resolve),
// so they share one sharedHooks that registers once and never unregisters:
// their counters add up per role. The buffered_* gauges of that role read the
// first consumer client (the delivery engine's tail reader).
type kafkaClientMetrics struct {
	producer, consumer kgo.Opt
}

func newKafkaClientMetrics(reg prometheus.Registerer) kafkaClientMetrics {
	role := func(name string) *sharedHooks {
		return &sharedHooks{Metrics: kprom.NewMetrics("aep_kafka",
			kprom.Registerer(reg),
			kprom.WithStaticLabel(prometheus.Labels{"client": name}),
			// Per broker, not per topic: topics are per tenant, and tenants
			// must not drive series cardinality.
			kprom.FetchAndProduceDetail(kprom.ByNode, kprom.Records, kprom.UncompressedBytes, kprom.ConsistentNaming),
			kprom.Histograms(kprom.RequestDurationE2E),
		)}
	}
	return kafkaClientMetrics{producer: kgo.WithHooks(role("producer")), consumer: kgo.WithHooks(role("consumer"))}
}

// sharedHooks is a kprom.Metrics that many clients may use: it registers
// on the first client and keeps its series when clients close.
type sharedHooks struct {
	*kprom.Metrics
	once sync.Once
}

// OnNewClient registers the series once. kgo calls it inside NewClient,
// before the client's other hooks can fire, and once.Do blocks a concurrent
// second NewClient until the series exist.
func (h *sharedHooks) OnNewClient(cl *kgo.Client) { h.once.Do(func() { h.Metrics.OnNewClient(cl) }) }

// OnClientClosed keeps the series: other clients still count into them.
func (h *sharedHooks) OnClientClosed(*kgo.Client) {}

var (
	_ kgo.HookNewClient    = (*sharedHooks)(nil)
	_ kgo.HookClientClosed = (*sharedHooks)(nil)
	_ kgo.HookBrokerRead   = (*sharedHooks)(nil)
)
