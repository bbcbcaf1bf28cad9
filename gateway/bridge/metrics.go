package bridge

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Every bridge asks for fetches of at least fetchMinBytes, waiting up to
// fetchMaxWait: at one event a request each produced batch is one record,
// and without a minimum the broker answers a fetch per event (the audit
// sealer measured 0.60x ingest that way, docs/benchmarks.md). A bridge is
// thus up to fetchMaxWait behind a slow trickle.
const (
	fetchMinBytes = 512 << 10
	fetchMaxWait  = 500 * time.Millisecond
)

// Metrics are the bridges' series, labelled by bridge (cloudevents, ocsf,
// otlp) and tenant. One Metrics serves every bridge of a process.
type Metrics struct {
	records    *prometheus.CounterVec // bridge, tenant, outcome
	lag        *prometheus.GaugeVec   // bridge, tenant
	aborted    *prometheus.CounterVec // bridge
	retries    *prometheus.CounterVec // bridge, reason
	duplicates *prometheus.CounterVec // bridge
	exports    *prometheus.HistogramVec

	mu   sync.Mutex
	lags map[string]map[partitionKey]int64 // bridge -> partition -> records behind
}

type partitionKey struct {
	topic     string
	partition int32
}

// Record outcomes (label outcome of aep_bridge_records_total).
const (
	outcomeWritten   = "written"    // written to the projection (in a transaction, or accepted by the receiver)
	outcomeDialectD  = "dialect_d"  // no mapping in either specification
	outcomeNotMapped = "not_mapped" // a type outside the projection (OCSF: not a security-relevant family)
	outcomeFiltered  = "filtered"   // left out by the tenant's rule
	outcomeInvalid   = "invalid"    // did not decode or project
	outcomeRejected  = "rejected"   // refused by the receiver for good (OTLP 4xx, partial success)
)

// NewMetrics registers the bridges' series with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{lags: map[string]map[partitionKey]int64{},
		records: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aep_bridge_records_total",
			Help: "Records read by a bridge, by outcome: written (in a committed or aborted transaction, or accepted by the OTLP receiver), dialect_d, not_mapped, filtered (the tenant's rule), invalid, rejected (refused for good by the OTLP receiver)."},
			[]string{"bridge", "tenant", "outcome"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "aep_bridge_lag_records",
			Help: "Records of the tenant's events topic not yet bridged, over the partitions this process reads (high watermark minus the next offset, at the last fetch)."},
			[]string{"bridge", "tenant"}),
		aborted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aep_bridge_aborted_total",
			Help: "Transactions aborted (a rebalance or a failed commit); their records are read and written again."}, []string{"bridge"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aep_bridge_retries_total",
			Help: "OTLP export attempts retried, by reason: unreachable (no connection), status (429, 502, 503, 504), timeout (sent, no answer)."}, []string{"bridge", "reason"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aep_bridge_possible_duplicates_total",
			Help: "Records a receiver may hold twice: sent again after an attempt whose outcome is unknown (timeout), or accepted but whose offsets could not be committed."}, []string{"bridge"}),
		exports: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "aep_bridge_export_seconds",
			Help: "Time to write one poll's records (transaction or OTLP export, retries included).", Buckets: prometheus.ExponentialBuckets(0.001, 4, 9)}, []string{"bridge"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.records, m.lag, m.aborted, m.retries, m.duplicates, m.exports} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("bridge: metrics (one Metrics per process): %w", err)
			}
		}
	}
	return m, nil
}

// count adds n records of outcome.
func (m *Metrics) count(bridge, tenant, outcome string, n int) {
	if n > 0 {
		m.records.WithLabelValues(bridge, tenant, outcome).Add(float64(n))
	}
}

// setLag records how far behind one partition is and republishes the
// tenant's sum. tenantOf names a topic's tenant.
func (m *Metrics) setLag(bridge string, tenantOf func(string) string, topic string, partition int32, behind int64) {
	if behind < 0 {
		behind = 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	lags := m.lags[bridge]
	if lags == nil {
		lags = map[partitionKey]int64{}
		m.lags[bridge] = lags
	}
	lags[partitionKey{topic, partition}] = behind
	var sum int64
	for k, v := range lags {
		if k.topic == topic {
			sum += v
		}
	}
	m.lag.WithLabelValues(bridge, tenantOf(topic)).Set(float64(sum))
}

// forget drops the lag of partitions this process no longer reads.
func (m *Metrics) forget(bridge string, tenantOf func(string) string, revoked map[string][]int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	lags := m.lags[bridge]
	for topic, ps := range revoked {
		var sum int64
		for _, p := range ps {
			delete(lags, partitionKey{topic, p})
		}
		for k, v := range lags {
			if k.topic == topic {
				sum += v
			}
		}
		m.lag.WithLabelValues(bridge, tenantOf(topic)).Set(float64(sum))
	}
}
