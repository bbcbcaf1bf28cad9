package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// metrics are the gateway's Prometheus series, registered on the registry
// given to New (not the global one, so several servers can live in one
// process, as tests do).
type metrics struct {
	requests       *prometheus.CounterVec   // route, method, code
	requestSeconds *prometheus.HistogramVec // route; streams excluded
	streamSeconds  *prometheus.HistogramVec // route; SSE and WebSocket streams only
	events         *prometheus.CounterVec   // dialect, result, reason
	produceLatency *prometheus.HistogramVec // dialect
	batchSize      *prometheus.HistogramVec // dialect
	ready          prometheus.Gauge
	duplicates     *prometheus.CounterVec // dialect
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aep_http_requests_total", Help: "HTTP requests by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		requestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "aep_http_request_duration_seconds", Help: "HTTP request latency by route pattern (streams excluded).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"route"}),
		streamSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "aep_http_stream_duration_seconds", Help: "How long SSE and WebSocket streams stayed open, by route pattern.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9), // 1 s .. 18 h
		}, []string{"route"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aep_ingest_events_total", Help: "Events offered for ingest by dialect, result (accepted|rejected) and reason.",
		}, []string{"dialect", "result", "reason"}),
		produceLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "aep_produce_latency_seconds", Help: "Time for Kafka to acknowledge (acks=all) one ingest request's events.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"dialect"}),
		batchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "aep_ingest_batch_events", Help: "Events per ingest request.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}, []string{"dialect"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aep_ingest_duplicates_total", Help: "Events answered from the idempotency window: already in the log, not written again (counted in aep_ingest_events_total as accepted too).",
		}, []string{"dialect"}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aep_broker_ready", Help: "1 while the Kafka cluster answers the readiness probe.",
		}),
	}
	reg.MustRegister(m.requests, m.requestSeconds, m.streamSeconds, m.events, m.produceLatency, m.batchSize, m.ready, m.duplicates)
	return m
}

func (m *metrics) accepted(d aep.Dialect, n int) {
	if n > 0 {
		m.events.WithLabelValues(d.String(), "accepted", "").Add(float64(n))
	}
}

func (m *metrics) rejected(d aep.Dialect, reason string, n int) {
	if n > 0 {
		m.events.WithLabelValues(d.String(), "rejected", reason).Add(float64(n))
	}
}

// isStream reports whether a served request was a stream: an SSE response
// (Content-Type text/event-stream, whatever the route) or an accepted
// WebSocket upgrade (101; a refused one is an ordinary request). Streams last
// as long as the client stays, so their durations say nothing about request
// latency and go to their own histogram.
func isStream(r *http.Request, w http.ResponseWriter, status int) bool {
	if status == http.StatusSwitchingProtocols && strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return true
	}
	ct, _, _ := strings.Cut(w.Header().Get("Content-Type"), ";")
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
}

// instrument counts every request by its route pattern (never the raw path,
// which would give clients control over series cardinality).
func (m *metrics) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		start := time.Now()
		var parked *bool // a parked stream is counted when it ends
		rr := r
		if mayPark(r) {
			parked = new(bool)
			rr = r.WithContext(transport.OnPark(r.Context(), m.onPark(r, parked, start)))
		}
		next.ServeHTTP(ww, rr)
		if parked != nil && *parked {
			return
		}
		status := responseStatus(r, ww)
		route := routeOf(r)
		m.requests.WithLabelValues(route, r.Method, strconv.Itoa(status)).Inc()
		if isStream(r, ww, status) {
			m.streamSeconds.WithLabelValues(route).Observe(time.Since(start).Seconds())
		} else {
			m.requestSeconds.WithLabelValues(route).Observe(time.Since(start).Seconds())
		}
	})
}

// onPark is instrument's transport.OnPark hook: a parked SSE stream is
// counted, and its duration observed, when it ends.
func (m *metrics) onPark(r *http.Request, parked *bool, start time.Time) func() func(int64) {
	return func() func(int64) {
		*parked = true
		route, method, code := routeOf(r), r.Method, strconv.Itoa(streamStatus(r))
		return func(int64) {
			m.requests.WithLabelValues(route, method, code).Inc()
			m.streamSeconds.WithLabelValues(route).Observe(time.Since(start).Seconds())
		}
	}
}
