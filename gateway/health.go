package gateway

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Pinger reports whether the Kafka cluster answers. *kgo.Client satisfies it.
type Pinger interface {
	Ping(ctx context.Context) error
}

// readiness probes the broker in the background and remembers the answer.
// Its goroutine is started by start and stopped (and waited for) by stop;
// stop is idempotent.
type readiness struct {
	pinger   Pinger
	topics   []ProvisioningReporter // say why topics could not be created
	checks   []ReadinessCheck
	interval time.Duration
	metrics  *metrics

	ok       atomic.Bool
	probed   atomic.Bool // a probe has answered (ok or not)
	draining atomic.Bool
	lastErr  atomic.Value // string

	stopOnce sync.Once
	quit     chan struct{}
	done     chan struct{}
}

func newReadiness(p Pinger, topics []ProvisioningReporter, checks []ReadinessCheck, interval time.Duration, m *metrics) *readiness {
	return &readiness{pinger: p, topics: topics, checks: checks, interval: interval, metrics: m, quit: make(chan struct{}), done: make(chan struct{})}
}

func (rd *readiness) start() {
	go func() {
		defer close(rd.done)
		t := time.NewTimer(rd.interval)
		defer t.Stop()
		for {
			rd.probe()
			// While the broker is down, probe often: ingest refuses until
			// a probe succeeds, so its recovery must be seen at once.
			next := rd.interval
			if !rd.ok.Load() {
				next = min(next, downProbeInterval)
			}
			t.Reset(next)
			select {
			case <-rd.quit:
				return
			case <-t.C:
			}
		}
	}()
}

// While the broker is down it is probed every downProbeInterval, each probe
// given at most downProbeTimeout: a client dialling a dead broker retries
// until its deadline, and a long one would delay seeing the broker back.
const (
	downProbeInterval = 200 * time.Millisecond
	downProbeTimeout  = 500 * time.Millisecond
)

func (rd *readiness) probe() {
	timeout := rd.interval
	if rd.probed.Load() && !rd.ok.Load() {
		timeout = min(timeout, downProbeTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := rd.pinger.Ping(ctx)
	rd.ok.Store(err == nil)
	rd.probed.Store(true)
	if err != nil {
		rd.lastErr.Store(err.Error())
		rd.metrics.ready.Set(0)
	} else {
		rd.lastErr.Store("")
		rd.metrics.ready.Set(1)
	}
}

// brokerDown reports why the cluster is known to be unreachable: the last
// probe failed. Before the first probe it reports nil (not known).
func (rd *readiness) brokerDown() error {
	if !rd.probed.Load() || rd.ok.Load() {
		return nil
	}
	msg, _ := rd.lastErr.Load().(string)
	return &BrokerDownError{Probe: msg}
}

// BrokerDownError says the readiness probe of the Kafka cluster failed.
type BrokerDownError struct{ Probe string }

func (e *BrokerDownError) Error() string { return "the Kafka cluster does not answer: " + e.Probe }

func (rd *readiness) stop() {
	rd.stopOnce.Do(func() { close(rd.quit) })
	<-rd.done
}

func (rd *readiness) handle(w http.ResponseWriter, _ *http.Request) {
	status, body := rd.state()
	writeJSON(w, status, body)
}

// handleBrief is /readyz for the public listener when an admin one serves
// the detailed answer: the same status code and status word, without the
// details (the broker's address and errors, topic names). Load balancers
// probing the serving port and the console's health badge still read it.
func (rd *readiness) handleBrief(w http.ResponseWriter, _ *http.Request) {
	status, body := rd.state()
	writeJSON(w, status, map[string]any{"status": body["status"]})
}

// state is the node's readiness: the status code and the answer's body.
func (rd *readiness) state() (int, map[string]any) {
	switch {
	case rd.draining.Load():
		return http.StatusServiceUnavailable, map[string]any{"status": "draining"}
	case !rd.ok.Load():
		msg, _ := rd.lastErr.Load().(string)
		if msg == "" {
			msg = "broker not probed yet"
		}
		return http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "kafka": msg}
	}
	for _, c := range rd.checks {
		if err := c.Err(); err != nil {
			return http.StatusServiceUnavailable, map[string]any{"status": "unavailable", c.Name: err.Error()}
		}
	}
	for _, pr := range rd.topics {
		if err := pr.LastError(); err != nil {
			return http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "provisioning": err.Error()}
		}
	}
	var warnings []string
	for _, pr := range rd.topics {
		if tw, ok := pr.(TopicWarner); ok {
			warnings = append(warnings, tw.Warnings()...)
		}
	}
	if len(warnings) > 0 {
		return http.StatusOK, map[string]any{"status": "ready", "topic_warnings": warnings}
	}
	return http.StatusOK, map[string]any{"status": "ready"}
}

// TopicWarner is a ProvisioningReporter that also knows differences of
// the topics that do not make the node unready (*partitioning.Provisioner:
// a shorter retention, fewer partitions); /readyz lists them, bounded.
type TopicWarner interface{ Warnings() []string }

// ReadinessCheck is a part of the node that /readyz asks besides the
// broker: while Err returns an error, /readyz answers 503 with the error
// under Name (the transport Hub's poller: "poller", see
// transport.Hub.PollerErr). Err must be cheap and safe for concurrent use.
type ReadinessCheck struct {
	Name string
	Err  func() error
}

// ProvisioningReporter remembers its last failure to create the topics
// the gateway needs (*partitioning.Provisioner does for tenant topics);
// /readyz answers 503 naming it while it is not nil.
type ProvisioningReporter interface{ LastError() error }

// reporters is topics (when it reports its provisioning) and more.
func reporters(topics any, more []ProvisioningReporter) []ProvisioningReporter {
	var out []ProvisioningReporter
	if pr, ok := topics.(ProvisioningReporter); ok {
		out = append(out, pr)
	}
	return append(out, more...)
}

func handleHealthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
