package durable

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// metrics are the durable cluster's Prometheus series (names unchanged
// from when they lived in the engine). They are registered on
// Config.Registerer when one is given; otherwise they count unregistered.
// Tenant labels go through the engine's cap (Engine.TenantLabel).
type metrics struct {
	durable      prometheus.Gauge       // open at_least_once streams
	redelivered  *prometheus.CounterVec // tenant: at_least_once redeliveries
	deadLettered *prometheus.CounterVec // tenant: events written to the dead-letter topic
	ackLag       prometheus.Histogram   // journal ack from another node: produced -> applied here
	journal      *journalMetrics
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		durable: prometheus.NewGauge(prometheus.GaugeOpts{Name: "aep_delivery_durable_streams", Help: "Open at_least_once streams on this node."}),
		redelivered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aep_delivery_redeliveries_total",
			Help: "at_least_once redeliveries (ack timeout or a new stream), by tenant (capped: " + engine.OtherTenant + " past the cap)."}, []string{"tenant"}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aep_delivery_dead_letters_total",
			Help: "Events dead-lettered (attempts exhausted or rejected by the consumer), by tenant (capped: " + engine.OtherTenant + " past the cap)."}, []string{"tenant"}),
		ackLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "aep_delivery_remote_ack_seconds",
			Help:    "Acks and rejections posted on another node: from their journal write to their application by the stream holder here.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
	}
	m.journal = newJournalMetrics(reg)
	if reg != nil {
		reg.MustRegister(m.durable, m.redelivered, m.deadLettered, m.ackLag)
	}
	return m
}

// redelivery counts one redelivery for tenant t.
func (e *Cluster) redelivery(t tenant.Tenant) {
	e.metrics.redelivered.WithLabelValues(e.eng.TenantLabel(t.String())).Inc()
}

// deadLetter counts one dead-lettered event for tenant t.
func (e *Cluster) deadLetter(t tenant.Tenant) {
	e.metrics.deadLettered.WithLabelValues(e.eng.TenantLabel(t.String())).Inc()
}
