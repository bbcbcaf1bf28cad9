package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/filterworker"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// produceEvents writes R events to k's topic, round robin over parts.
func produceEvents(t *testing.T, k *gatewaytest.Kafka, parts int, events [][]byte) {
	t.Helper()
	var recs []*kgo.Record
	for i, ev := range events {
		a, err := aep.Parse(ev, aep.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: k.Topic, Partition: int32(i % parts), Key: []byte(a.Session), Value: ev,
			Headers: partitioning.AppendHeaders(nil, &a)})
	}
	if err := k.Prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// numbered is n copies of the first golden event with ids evt_0..evt_n-1.
func numbered(t *testing.T, from, n int) [][]byte {
	t.Helper()
	base := gatewaytest.FixtureLines(t, "../../aep/testdata/r-golden.jsonl")[0]
	var out [][]byte
	for i := from; i < from+n; i++ {
		out = append(out, []byte(replaceOnce(string(base), `"01JX9YB0AAAA0000000000GOLD"`, `"evt_`+itoa(i)+`"`)))
	}
	return out
}

func replaceOnce(s, old, new string) string {
	for i := 0; i+len(old) <= len(s); i++ {
		if s[i:i+len(old)] == old {
			return s[:i] + new + s[i+len(old):]
		}
	}
	return s
}

// receiver is an OTLP/HTTP logs endpoint over a real socket whose answer
// the test sets: it keeps the LogRecords of every request it accepts.
type receiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	records  []map[string]any
	answer   atomic.Value // func(w) bool: true when it answered (refused) the request
	requests atomic.Int64
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{}
	r.answer.Store(func(http.ResponseWriter) bool { return false })
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		body, _ := io.ReadAll(req.Body)
		if req.URL.Path != "/v1/logs" || req.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "wrong path or type", http.StatusBadRequest)
			return
		}
		if r.answer.Load().(func(http.ResponseWriter) bool)(w) {
			return
		}
		recs, err := gatewaytest.OTLPLogsToPins(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.records = append(r.records, recs...)
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"partialSuccess":{}}`)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) got() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.records...)
}

// idCounts counts the records of each aep.event_id.
func idCounts(recs []map[string]any) map[string]int {
	out := map[string]int{}
	for _, r := range recs {
		id, _ := r["attributes"].(map[string]any)["aep.event_id"].(string)
		out[id]++
	}
	return out
}

func runOTLP(t *testing.T, k *gatewaytest.Kafka, endpoint, group string, reg prometheus.Registerer, timeout time.Duration) (stop func() error) {
	t.Helper()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	var n partitioning.Naming
	b, err := NewOTLP(OTLPConfig{Endpoint: endpoint, Timeout: timeout, BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		MaxRecords: 100, ClientOpts: []kgo.Opt{kgo.SeedBrokers(k.Cluster.ListenAddrs()...)}, TopicRegexp: filterworker.TopicRegexp(n),
		Group: group, SessionTimeout: 6 * time.Second, Logger: zerolog.Nop(), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return runUntilStopped(t, group, b.Run)
}

// committed is the group's committed offsets summed over the topic.
func committed(t *testing.T, k *gatewaytest.Kafka, group string) int64 {
	t.Helper()
	os, err := kadm.NewClient(k.Prod).FetchOffsets(context.Background(), group)
	if err != nil {
		return 0
	}
	var sum int64
	os.Each(func(o kadm.OffsetResponse) {
		if o.Topic == k.Topic && o.At > 0 {
			sum += o.At
		}
	})
	return sum
}

// Every golden event reaches the receiver once, as a valid OTLP/HTTP JSON
// request that reads back equal to the pins (the tenant added as the one
// resource attribute beyond them); the records are accepted before the
// offsets are committed.
func TestOTLPBridgeExportsThePinnedRecords(t *testing.T) {
	k := gatewaytest.NewKafka(t, "t1", 2)
	golden := gatewaytest.FixtureLines(t, "../../aep/testdata/r-golden.jsonl")
	produceEvents(t, k, 2, golden)
	rcv := newReceiver(t)
	reg := prometheus.NewRegistry()
	runOTLP(t, k, rcv.srv.URL+"/v1/logs", "g-otlp", reg, 5*time.Second)
	gatewaytest.Poll(t, "every golden event exported", func() bool { return len(rcv.got()) >= len(golden) })
	gatewaytest.Poll(t, "the offsets committed", func() bool { return committed(t, k, "g-otlp") == int64(len(golden)) })
	got := rcv.got()
	if len(got) != len(golden) {
		t.Fatalf("%d records for %d events", len(got), len(golden))
	}
	byKey := map[string]map[string]any{}
	for _, r := range got {
		res := map[string]any{} // shared by the records of one ResourceLogs: copied
		for k, v := range r["resource"].(map[string]any) {
			res[k] = v
		}
		if res["aep.tenant"] != "t1" {
			t.Fatalf("resource %v: want aep.tenant t1", res)
		}
		delete(res, "aep.tenant")
		r["resource"] = res
		a := r["attributes"].(map[string]any)
		byKey[fmt.Sprint(a["aep.event_id"], " ", a["aep.source"])] = r
	}
	pins := gatewaytest.FixturePins(t, "../../aep/testdata/r-otlp-expected.json", 4)
	for k, pin := range pins {
		var want map[string]any
		_ = json.Unmarshal(pin, &want)
		a := want["attributes"].(map[string]any)
		key := fmt.Sprint(a["aep.event_id"], " ", a["aep.source"])
		gotJ, _ := json.Marshal(byKey[key])
		wantJ, _ := json.Marshal(want)
		if string(gotJ) != string(wantJ) {
			t.Errorf("pin %s:\n got %s\nwant %s", k, gotJ, wantJ)
		}
	}
	if v, _, _ := gatewaytest.MetricSeries(t, reg, "aep_bridge_records_total", map[string]string{"bridge": "otlp", "tenant": "t1", "outcome": "written"}); v != float64(len(golden)) {
		t.Errorf("written %v, want %d", v, len(golden))
	}
}

// A receiver that answers 503 (Retry-After), then is unreachable, then
// accepts: every event arrives exactly once, the retries are counted by
// reason, and nothing is committed while the receiver refuses.
func TestOTLPBridgeRetriesThroughAnOutage(t *testing.T) {
	k := gatewaytest.NewKafka(t, "t1", 3)
	rcv := newReceiver(t)
	var refused atomic.Int64
	rcv.answer.Store(func(w http.ResponseWriter) bool {
		refused.Add(1)
		w.Header().Set("Retry-After", "1")
		http.Error(w, "collector busy", http.StatusServiceUnavailable)
		return true
	})
	// the bridge's endpoint is a proxy the test can take down: a closed
	// port is an unreachable receiver
	var down atomic.Bool
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			hj, _ := w.(http.Hijacker)
			c, _, _ := hj.Hijack()
			_ = c.Close() // no answer: the connection ends before a status
			return
		}
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, rcv.srv.URL+r.URL.Path, r.Body)
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer func() { _ = resp.Body.Close() }()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(proxy.Close)
	reg := prometheus.NewRegistry()
	runOTLP(t, k, proxy.URL+"/v1/logs", "g-otlp", reg, 2*time.Second)
	produceEvents(t, k, 3, numbered(t, 0, 300))
	gatewaytest.Poll(t, "refusals", func() bool { return refused.Load() >= 2 })
	if c := committed(t, k, "g-otlp"); c != 0 {
		t.Fatalf("%d offsets committed while the receiver refused", c)
	}
	down.Store(true)
	before := rcv.requests.Load()
	time.Sleep(700 * time.Millisecond)
	if rcv.requests.Load() != before {
		t.Fatal("the receiver was reached while down")
	}
	rcv.answer.Store(func(http.ResponseWriter) bool { return false })
	down.Store(false)
	produceEvents(t, k, 3, numbered(t, 300, 300))
	gatewaytest.Poll(t, "600 exported and committed", func() bool {
		return len(rcv.got()) >= 600 && committed(t, k, "g-otlp") == 600
	})
	for id, n := range idCounts(rcv.got()) {
		if n != 1 {
			t.Errorf("%s received %d times", id, n)
		}
	}
	if c := len(idCounts(rcv.got())); c != 600 {
		t.Fatalf("%d distinct events, want 600", c)
	}
	for _, reason := range []string{"status", "unreachable"} {
		if v, _, _ := gatewaytest.MetricSeries(t, reg, "aep_bridge_retries_total", map[string]string{"bridge": "otlp", "reason": reason}); v == 0 {
			t.Errorf("no %s retry counted", reason)
		}
	}
}

// A receiver that refuses for good (400) does not stall the bridge: the
// records are counted as rejected and the bridge goes on; a partial
// success counts its rejected records.
func TestOTLPBridgeCountsRefusalsAndPartialSuccess(t *testing.T) {
	k := gatewaytest.NewKafka(t, "t1", 1)
	rcv := newReceiver(t)
	var calls atomic.Int64
	rcv.answer.Store(func(w http.ResponseWriter) bool {
		switch calls.Add(1) {
		case 1:
			http.Error(w, "bad data", http.StatusBadRequest)
			return true
		case 2:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"partialSuccess":{"rejectedLogRecords":"3","errorMessage":"too old"}}`)
			return true
		}
		return false
	})
	reg := prometheus.NewRegistry()
	runOTLP(t, k, rcv.srv.URL+"/v1/logs", "g-otlp", reg, 2*time.Second)
	produceEvents(t, k, 1, numbered(t, 0, 50))
	gatewaytest.Poll(t, "the first batch refused", func() bool { return calls.Load() >= 1 && committed(t, k, "g-otlp") == 50 })
	produceEvents(t, k, 1, numbered(t, 50, 10))
	gatewaytest.Poll(t, "the partial success counted", func() bool {
		v, _, _ := gatewaytest.MetricSeries(t, reg, "aep_bridge_records_total", map[string]string{"bridge": "otlp", "tenant": "t1", "outcome": "rejected"})
		return v == 53
	})
	produceEvents(t, k, 1, numbered(t, 60, 10))
	gatewaytest.Poll(t, "the last batch accepted", func() bool { return len(rcv.got()) == 10 && committed(t, k, "g-otlp") == 70 })
	if v, _, _ := gatewaytest.MetricSeries(t, reg, "aep_bridge_records_total", map[string]string{"bridge": "otlp", "tenant": "t1", "outcome": "written"}); v != 17 {
		t.Errorf("written %v, want 17 (7 of the partial success, then 10)", v)
	}
	if v, _, _ := gatewaytest.MetricSeries(t, reg, "aep_bridge_retries_total", map[string]string{"bridge": "otlp"}); v != 0 {
		t.Errorf("%v retries of refusals that cannot succeed", v)
	}
}

// A bridge stopped while the receiver is down commits nothing it did not
// export; the bridge that takes its place exports every event. Attempts
// that timed out but were accepted all the same leave duplicates at the
// receiver (at least once), and the timeouts are counted.
func TestOTLPBridgeStoppedMidOutageLosesNothing(t *testing.T) {
	k := gatewaytest.NewKafka(t, "t1", 2)
	rcv := newReceiver(t)
	var slow atomic.Bool
	slow.Store(true)
	rcv.answer.Store(func(w http.ResponseWriter) bool {
		if slow.Load() {
			time.Sleep(600 * time.Millisecond) // past the bridge's 300 ms timeout, then accepted anyway
		}
		return false
	})
	reg := prometheus.NewRegistry()
	stop := runOTLP(t, k, rcv.srv.URL+"/v1/logs", "g-otlp", reg, 300*time.Millisecond)
	produceEvents(t, k, 2, numbered(t, 0, 200))
	gatewaytest.Poll(t, "timeouts", func() bool {
		v, _, _ := gatewaytest.MetricSeries(t, reg, "aep_bridge_retries_total", map[string]string{"bridge": "otlp", "reason": "timeout"})
		return v >= 2
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if c := committed(t, k, "g-otlp"); c != 0 {
		t.Fatalf("%d offsets committed by a bridge whose exports timed out", c)
	}
	slow.Store(false)
	reg2 := prometheus.NewRegistry()
	runOTLP(t, k, rcv.srv.URL+"/v1/logs", "g-otlp", reg2, 2*time.Second)
	gatewaytest.Poll(t, "every event exported by the second bridge", func() bool {
		return len(idCounts(rcv.got())) == 200 && committed(t, k, "g-otlp") == 200
	})
	dups := 0
	for _, n := range idCounts(rcv.got()) {
		dups += n - 1
	}
	if dups == 0 {
		t.Fatal("the accepted-after-timeout attempts left no duplicate: the test did not exercise them")
	}
	t.Logf("duplicates at the receiver: %d (timed-out attempts it accepted)", dups)
}
