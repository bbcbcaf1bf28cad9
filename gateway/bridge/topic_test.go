package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
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

func canon(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// run starts a bridge of instance id until the test ends; stop ends it.
func run(t *testing.T, k *gatewaytest.Kafka, id string, ceiling aep.Capture, reg prometheus.Registerer) (stop func() error) {
	t.Helper()
	return runTopic(t, k, CloudEvents, id, ceiling, Rules{}, reg)
}

// runTopic starts a topic bridge of projection p.
func runTopic(t *testing.T, k *gatewaytest.Kafka, p Projection, id string, ceiling aep.Capture, rules Rules, reg prometheus.Registerer) (stop func() error) {
	t.Helper()
	var n partitioning.Naming
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewTopic(TopicConfig{Projection: p, ClientOpts: []kgo.Opt{kgo.SeedBrokers(k.Cluster.ListenAddrs()...)}, Naming: n,
		TopicRegexp: filterworker.TopicRegexp(n), Group: "g-" + p.Name, InstanceID: id, MaxCapture: ceiling, Rules: rules,
		SessionTimeout: 6 * time.Second, Logger: zerolog.Nop(), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return runUntilStopped(t, id, b.Run)
}

// runUntilStopped runs fn in a goroutine until the test ends; stop ends it
// and returns its error.
func runUntilStopped(t *testing.T, id string, fn func(context.Context) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := fn(ctx)
		if err != nil {
			t.Logf("bridge %s: %v", id, err)
		}
		done <- err
	}()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// readCommitted reads every committed record of topic.
func readCommitted(t *testing.T, k *gatewaytest.Kafka, topic string, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Cluster.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.MetadataMaxAge(500*time.Millisecond)) // the topic may not exist yet
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of %d records of %s within 20s", len(out), want, topic)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// Golden R events in a tenant topic come out of its CloudEvents topic, in
// a transaction each poll, equal to the spec's pinned CloudEvents; D
// events are skipped and counted; the content-type header names the
// structured mode.
func TestBridgeWritesThePinnedCloudEvents(t *testing.T) {
	k := gatewaytest.NewKafka(t, "t1", 2)
	golden := gatewaytest.FixtureLines(t, "../../aep/testdata/r-golden.jsonl")[:12]
	ces := gatewaytest.FixtureLines(t, "../../aep/testdata/r-ce-expected.jsonl")
	var recs []*kgo.Record
	for i, g := range golden {
		a, err := aep.Parse(g, aep.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: k.Topic, Partition: int32(i % 2), Key: []byte(a.Session), Value: g,
			Headers: partitioning.AppendHeaders(nil, &a)})
	}
	if err := k.Prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	k.ProduceD(t, 0, "task.progress", "sd", 0) // no CloudEvents mapping: skipped
	reg := prometheus.NewRegistry()
	run(t, k, "n1", aep.CaptureFull, reg)
	var n partitioning.Naming
	out := readCommitted(t, k, n.CloudEvents("t1"), len(golden))
	byID := map[string]string{}
	for _, r := range out {
		var ce struct {
			ID, Source string
		}
		_ = json.Unmarshal(r.Value, &ce)
		byID[ce.ID+" "+ce.Source] = canon(t, r.Value)
		if h := r.Headers; len(h) != 1 || h[0].Key != "content-type" || string(h[0].Value) != ContentTypeCloudEvents {
			t.Errorf("headers %v", h)
		}
	}
	for i := range golden {
		var ce struct {
			ID, Source string
		}
		_ = json.Unmarshal(ces[i], &ce)
		if byID[ce.ID+" "+ce.Source] != canon(t, ces[i]) {
			t.Errorf("golden %d: got %s\nwant %s", i, byID[ce.ID+" "+ce.Source], ces[i])
		}
	}
	if len(out) != len(golden) {
		t.Fatalf("%d CloudEvents for %d R events", len(out), len(golden))
	}
	gatewaytest.Poll(t, "the D event counted as skipped", func() bool {
		v, _, _ := gatewaytest.MetricSeries(t, reg, "aep_bridge_records_total", map[string]string{"bridge": "cloudevents", "tenant": "t1", "outcome": "dialect_d"})
		return v == 1
	})
	// the partition layout is the events topic's
	ends, err := kadm.NewClient(k.Prod).ListEndOffsets(context.Background(), n.CloudEvents("t1"))
	if err != nil {
		t.Fatal(err)
	}
	if p0, _ := ends.Lookup(n.CloudEvents("t1"), 0); p0.Offset < 6 {
		t.Errorf("partition 0 of the CloudEvents topic ends at %d", p0.Offset)
	}
}

// A bridge stopped and another started (new instance, same group) goes on
// from the committed offsets: every event once, none lost, none twice.
func TestBridgeRestartedWritesEachEventOnce(t *testing.T) {
	k := gatewaytest.NewKafka(t, "t1", 3)
	golden := gatewaytest.FixtureLines(t, "../../aep/testdata/r-golden.jsonl")
	base := golden[0]
	produce := func(from, n int) {
		var recs []*kgo.Record
		for i := from; i < from+n; i++ {
			ev := bytes.Replace(base, []byte(`"01JX9YB0AAAA0000000000GOLD"`), []byte(`"evt_`+itoa(i)+`"`), 1)
			a, err := aep.Parse(ev, aep.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, &kgo.Record{Topic: k.Topic, Partition: int32(i % 3), Value: ev, Headers: partitioning.AppendHeaders(nil, &a)})
		}
		if err := k.Prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, 500)
	stop := run(t, k, "n1", aep.CaptureMetadata, nil)
	produce(500, 500)
	time.Sleep(200 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	produce(1000, 500)
	run(t, k, "n2", aep.CaptureMetadata, nil)
	var n partitioning.Naming
	out := readCommitted(t, k, n.CloudEvents("t1"), 1500)
	seen := map[string]int{}
	for _, r := range out {
		var ce struct{ ID string }
		_ = json.Unmarshal(r.Value, &ce)
		seen[ce.ID]++
	}
	for i := range 1500 {
		if seen["evt_"+itoa(i)] != 1 {
			t.Fatalf("evt_%d written %d times", i, seen["evt_"+itoa(i)])
		}
	}
	time.Sleep(500 * time.Millisecond) // nothing more comes
	if again := readCommitted(t, k, n.CloudEvents("t1"), 1500); len(again) != 1500 || !reflect.DeepEqual(len(again), len(out)) {
		t.Fatalf("%d records, want 1500", len(again))
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// The OCSF bridge writes the pinned OCSF records of the security-relevant
// families, nothing for the others (counted not_mapped).
func TestBridgeWritesThePinnedOCSFRecords(t *testing.T) {
	k := gatewaytest.NewKafka(t, "t1", 2)
	golden := gatewaytest.FixtureLines(t, "../../aep/testdata/r-golden.jsonl")
	produceEvents(t, k, 2, golden)
	pins := gatewaytest.FixturePins(t, "../../aep/testdata/r-ocsf-expected.json", 8)
	mapped := 0
	for _, g := range golden {
		if rec, err := aep.ToOCSF(g, aep.CaptureMetadata); err == nil && rec != nil {
			mapped++
		}
	}
	reg := prometheus.NewRegistry()
	runTopic(t, k, OCSF, "n1", aep.CaptureMetadata, Rules{}, reg)
	var n partitioning.Naming
	out := readCommitted(t, k, n.OCSF("t1"), mapped)
	byUID := map[string]string{}
	for _, r := range out {
		var rec struct {
			Metadata struct{ UID string }
			Message  string
		}
		_ = json.Unmarshal(r.Value, &rec)
		byUID[rec.Metadata.UID+" "+rec.Message] = canon(t, r.Value)
		if h := r.Headers; len(h) != 1 || string(h[0].Value) != ContentTypeOCSF {
			t.Errorf("headers %v", h)
		}
	}
	for k, pin := range pins {
		var rec struct {
			Metadata struct{ UID string }
			Message  string
		}
		_ = json.Unmarshal(pin, &rec)
		if byUID[rec.Metadata.UID+" "+rec.Message] != canon(t, pin) {
			t.Errorf("pin %s: got %s\nwant %s", k, byUID[rec.Metadata.UID+" "+rec.Message], pin)
		}
	}
	if len(out) != mapped {
		t.Fatalf("%d OCSF records, want %d", len(out), mapped)
	}
	gatewaytest.Poll(t, "the other families counted", func() bool {
		v, _, _ := gatewaytest.MetricSeries(t, reg, "aep_bridge_records_total", map[string]string{"bridge": "ocsf", "tenant": "t1", "outcome": "not_mapped"})
		return v == float64(len(golden)-mapped)
	})
}

// A tenant's rule narrows its bridge: a filter leaves other types out
// (counted filtered), a lower ceiling drops payloads, "off" leaves the
// tenant out, and another tenant is unaffected.
func TestBridgeRulesPerTenant(t *testing.T) {
	k := gatewaytest.NewKafka(t, "t1", 1)
	k2 := *k
	k2.Topic = partitioning.Naming{}.Events("t2")
	if _, err := kadm.NewClient(k.Prod).CreateTopic(context.Background(), 1, -1, nil, k2.Topic); err != nil {
		t.Fatal(err)
	}
	rules, err := ParseRules([]byte(`{"tenants": {
		"t1": {"cloudevents": {"filter": {"type": ["tool.*"]}, "max_capture": "none"}},
		"*":  {"cloudevents": {"off": true}},
		"t2": {"ocsf": {"off": true}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	golden := gatewaytest.FixtureLines(t, "../../aep/testdata/r-golden.jsonl")
	produceEvents(t, k, 1, golden)
	produceEvents(t, &k2, 1, golden) // t2: its own entry names only ocsf, so cloudevents falls back to "*": off
	tools := 0
	for _, g := range golden {
		a, _ := aep.Parse(g, aep.Limits{})
		if len(a.Type) > 5 && a.Type[:5] == "tool." {
			tools++
		}
	}
	reg := prometheus.NewRegistry()
	runTopic(t, k, CloudEvents, "n1", aep.CaptureFull, rules, reg)
	var n partitioning.Naming
	out := readCommitted(t, k, n.CloudEvents("t1"), tools)
	for _, r := range out {
		var ce struct {
			Type string
			Data json.RawMessage
		}
		_ = json.Unmarshal(r.Value, &ce)
		if len(ce.Type) < 13 || ce.Type[:13] != "dev.aep.tool." {
			t.Errorf("type %s passed a tool.* filter", ce.Type)
		}
		if len(ce.Data) > 0 && string(ce.Data) != "null" {
			t.Errorf("%s: data %s at ceiling none", ce.Type, ce.Data)
		}
	}
	gatewaytest.Poll(t, "the rest of t1 and all of t2 counted filtered", func() bool {
		v1, _, _ := gatewaytest.MetricSeries(t, reg, "aep_bridge_records_total", map[string]string{"bridge": "cloudevents", "tenant": "t1", "outcome": "filtered"})
		v2, _, _ := gatewaytest.MetricSeries(t, reg, "aep_bridge_records_total", map[string]string{"bridge": "cloudevents", "tenant": "t2", "outcome": "filtered"})
		return v1 == float64(len(golden)-tools) && v2 == float64(len(golden))
	})
	if len(out) != tools {
		t.Fatalf("%d CloudEvents, want %d", len(out), tools)
	}
	for _, bad := range []string{`{"tenants":{"t1":{"kafka":{}}}}`, `{"tenants":{"t1":{"ocsf":{"max_capture":"all"}}}}`,
		`{"tenants":{"t1":{"ocsf":{"filter":{"agent":"claude*"}}}}}`, `{"tenant":{}}`, `[]`} {
		if _, err := ParseRules([]byte(bad)); err == nil {
			t.Errorf("ParseRules(%s) accepted", bad)
		}
	}
}

// Binary mode: each pinned CloudEvent's attributes come back from the ce_
// headers (canonical string forms), datacontenttype from content-type, and
// data is the value.
func TestBridgeWritesBinaryModeCloudEvents(t *testing.T) {
	k := gatewaytest.NewKafka(t, "t1", 2)
	golden := gatewaytest.FixtureLines(t, "../../aep/testdata/r-golden.jsonl")[:16]
	ces := gatewaytest.FixtureLines(t, "../../aep/testdata/r-ce-expected.jsonl")
	produceEvents(t, k, 2, golden)
	runTopic(t, k, CloudEventsBinary, "n1", aep.CaptureFull, Rules{}, nil)
	var n partitioning.Naming
	out := readCommitted(t, k, n.CloudEvents("t1"), len(golden))
	got := map[string]*kgo.Record{}
	for _, r := range out {
		for _, h := range r.Headers {
			if h.Key == "ce_id" {
				got[string(h.Value)] = r
			}
		}
	}
	for i := range golden {
		var want map[string]json.RawMessage
		if err := json.Unmarshal(ces[i], &want); err != nil {
			t.Fatal(err)
		}
		var id string
		_ = json.Unmarshal(want["id"], &id)
		r := got[id]
		if r == nil {
			t.Fatalf("golden %d (%s): no binary-mode record", i, id)
		}
		hs := map[string]string{}
		for _, h := range r.Headers {
			hs[h.Key] = string(h.Value)
		}
		for a, v := range want {
			var s string
			if json.Unmarshal(v, &s) != nil {
				s = string(v)
			}
			switch a {
			case "data":
				if canon(t, r.Value) != canon(t, v) {
					t.Errorf("golden %d: value %s, want data %s", i, r.Value, v)
				}
			case "datacontenttype":
				if hs["content-type"] != s {
					t.Errorf("golden %d: content-type %q, want %q", i, hs["content-type"], s)
				}
			default:
				if hs["ce_"+a] != s {
					t.Errorf("golden %d: ce_%s = %q, want %q", i, a, hs["ce_"+a], s)
				}
			}
		}
		if _, hasData := want["data"]; len(r.Headers) != len(want)-map[bool]int{true: 1}[hasData] {
			t.Errorf("golden %d: %d headers for %d attributes", i, len(r.Headers), len(want))
		}
	}
}
