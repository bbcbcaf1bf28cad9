package main

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// kafkaClientMetrics are franz-go's client metrics (plugin/kprom) under
// aep_kafka_*, on the gateway's registry, with a client label: "producer"
// for the ingest producer, "consumer" for every client the delivery engine
// and the streaming bindings open.
//
// kprom registers its series when a client is created and unregisters them
// when it closes, so one kprom.Metrics serves one client. The consumers come
// and go (one per durable stream, per catch-up reader, per cursor resolve),
// so each role shares one sharedHooks that registers once and never
// unregisters: counters add up per role, and the buffered_* gauges sum over
// the role's open clients.
type kafkaClientMetrics struct {
	producer, consumer kgo.Opt
}

func newKafkaClientMetrics(reg prometheus.Registerer) kafkaClientMetrics {
	role := func(name string) *sharedHooks {
		labels := prometheus.Labels{"client": name}
		return &sharedHooks{
			Metrics: kprom.NewMetrics(kafkaNamespace,
				kprom.Registerer(reg),
				kprom.WithStaticLabel(labels),
				// Per broker, not per topic: topics are per tenant, and
				// tenants must not drive series cardinality.
				kprom.FetchAndProduceDetail(kprom.ByNode, kprom.Records, kprom.UncompressedBytes, kprom.ConsistentNaming),
				kprom.Histograms(kprom.RequestDurationE2E),
			),
			reg: reg, labels: labels, clients: map[*kgo.Client]struct{}{},
		}
	}
	return kafkaClientMetrics{producer: kgo.WithHooks(role("producer")), consumer: kgo.WithHooks(role("consumer"))}
}

const kafkaNamespace = "aep_kafka"

// sharedHooks is a kprom.Metrics that many clients may use: it registers
// on the first client, keeps its series when clients close, and reports
// the buffered_* gauges as sums over the clients still open.
type sharedHooks struct {
	*kprom.Metrics
	reg    prometheus.Registerer
	labels prometheus.Labels
	once   sync.Once

	mu      sync.Mutex
	clients map[*kgo.Client]struct{} // open clients of this role
}

// OnNewClient registers the series once. kgo calls it inside NewClient,
// before the client's other hooks can fire, and once.Do blocks a concurrent
// second NewClient until the series exist.
func (h *sharedHooks) OnNewClient(cl *kgo.Client) {
	h.mu.Lock()
	h.clients[cl] = struct{}{}
	h.mu.Unlock()
	h.once.Do(func() {
		h.Metrics.OnNewClient(cl)
		h.sumBuffered()
	})
}

// OnClientClosed keeps the series (other clients still count into them) and
// forgets the client for the buffered gauges.
func (h *sharedHooks) OnClientClosed(cl *kgo.Client) {
	h.mu.Lock()
	delete(h.clients, cl)
	h.mu.Unlock()
}

// sumBuffered replaces kprom's buffered_* gauges, which read the one client
// they were created for, by gauges summing over the role's open clients.
// Unregister finds kprom's collector by its name and constant labels. Two of
// kprom's gauges end in _total, which Prometheus reserves for counters
// (promtool check metrics flags them); ours drop the suffix. Help strings
// stay kprom's: the registry keeps a name's help after Unregister.
func (h *sharedHooks) sumBuffered() {
	for _, g := range []struct {
		kprom, name, help string
		read              func(*kgo.Client) int64
	}{
		{"buffered_produce_records_total", "buffered_produce_records", "Total number of records buffered within the client ready to be produced", (*kgo.Client).BufferedProduceRecords},
		{"buffered_produce_bytes", "buffered_produce_bytes", "Total number of bytes buffered within the client ready to be produced", (*kgo.Client).BufferedProduceBytes},
		{"buffered_fetch_records_total", "buffered_fetch_records", "Total number of records buffered within the client ready to be consumed", (*kgo.Client).BufferedFetchRecords},
		{"buffered_fetch_bytes", "buffered_fetch_bytes", "Total number of bytes buffered within the client ready to be consumed", (*kgo.Client).BufferedFetchBytes},
	} {
		h.reg.Unregister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: kafkaNamespace, Name: g.kprom, Help: g.help, ConstLabels: h.labels}, nil))
		opts := prometheus.GaugeOpts{Namespace: kafkaNamespace, Name: g.name, Help: g.help, ConstLabels: h.labels}
		h.reg.MustRegister(prometheus.NewGaugeFunc(opts, func() float64 {
			h.mu.Lock()
			defer h.mu.Unlock()
			var n int64
			for cl := range h.clients {
				n += g.read(cl)
			}
			return float64(n)
		}))
	}
}

var (
	_ kgo.HookNewClient    = (*sharedHooks)(nil)
	_ kgo.HookClientClosed = (*sharedHooks)(nil)
	_ kgo.HookBrokerE2E    = (*sharedHooks)(nil)
)

// hubRefusals are aep_stream_refusals_total{reason}: streams (SSE and
// WebSocket, every binding) the Hub refused, over the tenant's
// --max-streams-per-tenant ("tenant-limit") or during shutdown
// ("shutting-down"); aep_sse_parked_streams and
// aep_websocket_parked_connections, the streams the Hub holds parked;
// aep_poller_failures_total, the failures of its poller.
func hubRefusals(h *transport.Hub) []prometheus.Collector {
	const name, help = "aep_stream_refusals_total", "Streams (SSE and WebSocket) refused on admission, by reason: tenant-limit (--max-streams-per-tenant) or shutting-down."
	limit := func() float64 { n, _ := h.Refusals(); return float64(n) }
	shut := func() float64 { _, n := h.Refusals(); return float64(n) }
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: prometheus.Labels{"reason": "tenant-limit"}}, limit),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: prometheus.Labels{"reason": "shutting-down"}}, shut),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "aep_sse_parked_streams",
			Help: "SSE streams parked now: held without a goroutine until they have something to write (HTTP/1.x on Linux)."},
			func() float64 { return float64(h.Parked()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "aep_websocket_parked_connections",
			Help: "WebSocket connections parked now: on the poller, with a reader, writer or subscription pump only while it has work (HTTP/1.x on Linux)."},
			func() float64 { return float64(h.ParkedWebSockets()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "aep_poller_failures_total",
			Help: "Failures of the poller that holds parked streams (epoll_wait failed): its streams moved to goroutines, no stream parks until restart and /readyz answers 503."},
			func() float64 { return float64(h.PollerFailures()) }),
	}
}
