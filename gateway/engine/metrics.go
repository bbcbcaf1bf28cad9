package engine

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// metrics are the engine's Prometheus series. They are registered on
// Config.Registerer when one is given; otherwise they count unregistered.
type metrics struct {
	subscriptions prometheus.Gauge       // open live/replayable subscriptions
	durable       prometheus.Gauge       // open at_least_once streams
	delivered     prometheus.Counter     // events queued to a subscriber (live, catch-up, durable)
	dropped       prometheus.Counter     // best_effort events dropped for a full queue
	fallbacks     prometheus.Counter     // lossless subscribers moved back to catch-up reading
	catchUps      prometheus.Gauge       // subscriptions reading their topic on their own client
	regFailures   prometheus.Counter     // LiveWorkers: failed registry writes (each retried until it lands)
	redelivered   *prometheus.CounterVec // tenant: at_least_once redeliveries
	deadLettered  *prometheus.CounterVec // tenant: events written to the dead-letter topic
	tenants       *tenantLabels
	refusals      *prometheus.CounterVec
	ackLag        prometheus.Histogram // journal ack from another node: produced -> applied here
	journal       *journalMetrics
}

func newMetrics(reg prometheus.Registerer, maxTenants int) *metrics {
	m := &metrics{
		subscriptions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "aep_delivery_subscriptions", Help: "Open best_effort and replayable subscriptions on this node."}),
		durable:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "aep_delivery_durable_streams", Help: "Open at_least_once streams on this node."}),
		delivered:     prometheus.NewCounter(prometheus.CounterOpts{Name: "aep_delivery_events_total", Help: "Events queued to subscribers (each subscriber counts once)."}),
		dropped:       prometheus.NewCounter(prometheus.CounterOpts{Name: "aep_delivery_dropped_total", Help: "best_effort events dropped because a subscriber's queue was full."}),
		fallbacks:     prometheus.NewCounter(prometheus.CounterOpts{Name: "aep_delivery_fallbacks_total", Help: "Lossless subscribers that fell behind and went back to reading Kafka."}),
		catchUps: prometheus.NewGauge(prometheus.GaugeOpts{Name: "aep_delivery_catchups",
			Help: "Subscriptions reading their topic on a client of their own: replays, fallbacks of slow lossless subscribers, and (--live-delivery workers) streams the filter workers have not answered yet."}),
		regFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "aep_delivery_registry_write_failures_total",
			Help: "--live-delivery workers: failed attempts to write this node's subscription entries to the registry topic (each is retried until it lands)."}),
		redelivered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aep_delivery_redeliveries_total",
			Help: "at_least_once redeliveries (ack timeout or a new stream), by tenant (capped: " + OtherTenant + " past the cap)."}, []string{"tenant"}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aep_delivery_dead_letters_total",
			Help: "Events dead-lettered (attempts exhausted or rejected by the consumer), by tenant (capped: " + OtherTenant + " past the cap)."}, []string{"tenant"}),
		tenants: newTenantLabels(maxTenants),
		ackLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "aep_delivery_remote_ack_seconds",
			Help:    "Acks and rejections posted on another node: from their journal write to their application by the stream holder here.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aep_delivery_refusals_total", Help: "Delivery requests refused by a limit, by limit."}, []string{"limit"}),
	}
	m.journal = newJournalMetrics(reg)
	if reg != nil {
		reg.MustRegister(m.subscriptions, m.durable, m.delivered, m.dropped, m.fallbacks, m.redelivered, m.deadLettered, m.refusals, m.ackLag)
	}
	if reg != nil {
		reg.MustRegister(m.catchUps, m.regFailures)
	}
	return m
}

// redelivery counts one redelivery for tenant t.
func (m *metrics) redelivery(t tenant.Tenant) {
	m.redelivered.WithLabelValues(m.tenants.label(t.String())).Inc()
}

// deadLetter counts one dead-lettered event for tenant t.
func (m *metrics) deadLetter(t tenant.Tenant) {
	m.deadLettered.WithLabelValues(m.tenants.label(t.String())).Inc()
}

// OtherTenant is the tenant label of every tenant past the cap of
// Config.MetricsMaxTenants.
const OtherTenant = "_other"

// DefaultMetricsMaxTenants is the tenant label cap of a zero
// Config.MetricsMaxTenants.
const DefaultMetricsMaxTenants = 100

// tenantLabels bounds the tenant label's values: the first max tenants
// seen by this process keep their name, later ones share OtherTenant. A
// tenant keeps its label for the life of the process (series never flip).
type tenantLabels struct {
	max  int
	mu   sync.Mutex
	seen map[string]struct{} // guarded by mu
}

func newTenantLabels(max int) *tenantLabels {
	if max <= 0 {
		max = DefaultMetricsMaxTenants
	}
	return &tenantLabels{max: max, seen: map[string]struct{}{}}
}

func (l *tenantLabels) label(t string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[t]; ok {
		return t
	}
	if len(l.seen) >= l.max {
		return OtherTenant
	}
	l.seen[t] = struct{}{}
	return t
}

// Refused counts a request refused by limit (aep_delivery_refusals_total).
func (e *Engine) Refused(limit string) { e.metrics.refusals.WithLabelValues(limit).Inc() }
