package gateway

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/aep-gateway/aep-gateway/aep"
)

// holdProduce makes the kfake broker hold every Produce request until the
// returned release is called (then it writes them as usual): the records
// are written, but late.
func holdProduce(g *testGateway) (release func()) {
	gate := make(chan struct{})
	var once sync.Once
	g.cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		g.cluster.KeepControl()
		g.cluster.SleepControl(func() { <-gate })
		return nil, nil, false // handled by the broker as usual once woken
	})
	return func() { once.Do(func() { close(gate) }) }
}

// A request whose events Kafka does not acknowledge within
// --produce-timeout is answered then (not after --write-timeout) with an
// answer saying the event may be in the log; the client's retries with the
// same id do not write it twice: while the first write is unresolved the
// retry is told so and nothing is sent, and once it landed the retry is
// answered 202 with the first write's position. Before the idempotency
// window the retry wrote a second record.
func TestIngestAmbiguousAnswerThenRetryWritesOnce(t *testing.T) {
	for _, d := range []aep.Dialect{aep.DialectR, aep.DialectD} {
		t.Run(d.String(), func(t *testing.T) {
			g := newTestGateway(t, func(c *Config) { c.WriteTimeout = 10 * time.Second; c.ProduceTimeout = 300 * time.Millisecond })
			post := func(body string) response {
				if d == aep.DialectR {
					return g.postR("application/json", []byte(body))
				}
				return g.post("/aep/events", "application/x-ndjson", nil, []byte(body))
			}
			ev0, ev1 := rEvent("s", 0), rEvent("s", 1)
			if d == aep.DialectD {
				ev0, ev1 = dEvent(0, "s"), dEvent(1, "s")
			}
			warm := post(ev0) // provisions the tenant topic
			if warm.status != http.StatusAccepted {
				t.Fatalf("warm-up: %d %s", warm.status, warm.body)
			}
			topic := warm.json(t)["topic"].(string)

			release := holdProduce(g)
			defer release()
			start := time.Now()
			first := post(ev1)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("ambiguous answer after %s: not bounded by the produce timeout", took)
			}
			if first.status != http.StatusServiceUnavailable || first.header.Get("Retry-After") == "" {
				t.Fatalf("first attempt: %d %s", first.status, first.body)
			}
			if !strings.Contains(string(first.body), `"in_log":"unknown"`) {
				t.Errorf("first attempt does not say the event may be in the log: %s", first.body)
			}
			// A retry while the first write is unresolved: in doubt, nothing sent.
			again := post(ev1)
			if again.status != http.StatusServiceUnavailable || !strings.Contains(string(again.body), `"in_log":"unknown"`) {
				t.Fatalf("retry while in doubt: %d %s", again.status, again.body)
			}
			release()
			waitFor(t, func() bool { return g.records(topic) == 2 }) // the held write lands
			retry := post(ev1)
			if retry.status != http.StatusAccepted {
				t.Fatalf("retry after the write landed: %d %s", retry.status, retry.body)
			}
			pos := retry.json(t)["positions"].([]any)[0].(map[string]any)
			recs := g.readAll(topic, 2)
			if n := g.records(topic); n != 2 {
				t.Fatalf("%d records in the log, want 2: the retry wrote a duplicate", n)
			}
			last := recs[len(recs)-1]
			if int32(pos["partition"].(float64)) != last.Partition || int64(pos["offset"].(float64)) != last.Offset {
				t.Errorf("retry answered at %v, the event is at %d/%d", pos, last.Partition, last.Offset)
			}
		})
	}
}

// While the readiness probe finds the cluster unreachable, ingest refuses
// at once with a retryable 503 that says the event is not in the log,
// instead of holding the request for the produce timeout.
func TestIngestFailsFastWhileBrokerDown(t *testing.T) {
	g := newTestGateway(t, func(c *Config) {
		c.WriteTimeout, c.ProduceTimeout, c.ReadyInterval = 20*time.Second, 10*time.Second, 100*time.Millisecond
	})
	if resp := g.postR("application/json", []byte(rEvent("s", 0))); resp.status != http.StatusAccepted {
		t.Fatalf("warm-up: %d %s", resp.status, resp.body)
	}
	g.cluster.Close()
	waitFor(t, func() bool { // /readyz goes down
		r, err := http.Get(g.http.URL + "/readyz")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusServiceUnavailable
	})
	for _, tc := range []struct {
		name  string
		post  func() response
		inLog string
	}{
		{"R", func() response { return g.postR("application/json", []byte(rEvent("s", 1))) }, `"in_log":"no"`},
		{"D", func() response { return g.post("/aep/events", "application/x-ndjson", nil, []byte(dEvent(1, "s"))) }, `"in_log":"no"`},
	} {
		start := time.Now()
		resp := tc.post()
		took := time.Since(start)
		if resp.status != http.StatusServiceUnavailable || resp.header.Get("Retry-After") == "" {
			t.Fatalf("%s: %d %s", tc.name, resp.status, resp.body)
		}
		if !strings.Contains(string(resp.body), tc.inLog) {
			t.Errorf("%s: answer does not say the event is not in the log: %s", tc.name, resp.body)
		}
		if took > 5*time.Second {
			t.Errorf("%s: answered after %s, not at once (produce timeout 10s)", tc.name, took)
		}
	}
}

// The same event twice in one request is written once; both copies are
// answered with its position. A later request with it again is answered
// from the idempotency window.
func TestIngestSameEventTwiceInOneRequest(t *testing.T) {
	g := newTestGateway(t, nil)
	body := dEvent(7, "s") + "\n" + dEvent(8, "s") + "\n" + dEvent(7, "s") + "\n"
	resp := g.post("/aep/events", "application/x-ndjson", nil, []byte(body))
	if resp.status != http.StatusAccepted {
		t.Fatalf("%d %s", resp.status, resp.body)
	}
	m := resp.json(t)
	topic := m["topic"].(string)
	ps := m["positions"].([]any)
	if m["accepted"].(float64) != 3 || len(ps) != 3 {
		t.Fatalf("answer %s", resp.body)
	}
	first, third := ps[0].(map[string]any), ps[2].(map[string]any)
	if first["partition"] != third["partition"] || first["offset"] != third["offset"] {
		t.Errorf("the two copies answered at different positions: %v %v", first, third)
	}
	if n := g.records(topic); n != 2 {
		t.Fatalf("%d records, want 2", n)
	}
	again := g.post("/aep/events", "application/x-ndjson", nil, []byte(dEvent(7, "s")+"\n"))
	if again.status != http.StatusAccepted || g.records(topic) != 2 {
		t.Fatalf("a retry in a later request: %d %s, %d records", again.status, again.body, g.records(topic))
	}
}

// Another event under a reused identity (same source and id, other bytes)
// is no retry: it is written, in one request and in a later one, while a
// byte-identical copy is not (two fixtures of D's conformance set reuse
// evt_sub_001 of agent:researcher for different events).
func TestIngestReusedIDOtherEventIsWritten(t *testing.T) {
	g := newTestGateway(t, nil)
	a := dEvent(9, "s")
	b := strings.Replace(a, `"session_id":"s"`, `"session_id":"s2"`, 1)
	if a == b {
		t.Fatalf("the second event is the same: %s", a)
	}
	resp := g.post("/aep/events", "application/x-ndjson", nil, []byte(a+"\n"+b+"\n"))
	if resp.status != http.StatusAccepted {
		t.Fatalf("%d %s", resp.status, resp.body)
	}
	topic := resp.json(t)["topic"].(string)
	if n := g.records(topic); n != 2 {
		t.Fatalf("%d records, want 2: the other event under the reused id was dropped", n)
	}
	c := strings.Replace(a, `"session_id":"s"`, `"session_id":"s3"`, 1)
	if r := g.post("/aep/events", "application/x-ndjson", nil, []byte(a+"\n"+c+"\n")); r.status != http.StatusAccepted || g.records(topic) != 3 {
		t.Fatalf("a later request with a copy and another reuse: %d %s, %d records, want 3", r.status, r.body, g.records(topic))
	}
}
