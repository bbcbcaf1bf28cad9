package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/bridge"
	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// lockedLog is a log writer the test reads while the gateway writes.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) lines() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// The Kafka client's errors reach the log as their text (the old adapter
// wrote "err":{}), through plugin/kzerolog.
func TestKafkaClientErrorsAreLoggedWithTheirText(t *testing.T) {
	sink := &lockedLog{}
	// A port nothing listens on: every dial is refused.
	opts, err := kafkaOpts(config{}, []string{"127.0.0.1:1"}, zerolog.New(sink).Level(zerolog.InfoLevel))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := cl.Ping(ctx); err == nil {
		t.Fatal("ping of a closed port succeeded")
	}
	var found bool
	for _, l := range sink.lines() {
		if l["component"] != "kafka-client" {
			continue
		}
		if lvl := l["level"]; lvl != "warn" && lvl != "error" {
			t.Errorf("kafka client logged at %v, want warn and above only: %v", lvl, l)
		}
		if _, ok := l["err"]; ok {
			t.Errorf("kafka client line with key err, want error like every other line: %v", l)
		}
		if e, ok := l["error"].(string); ok && strings.Contains(e, "connection refused") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no kafka-client line with the dial error's text:\n%s", sink.buf.String())
	}
}

// Log timestamps carry milliseconds: lines of one second stay in order
// across pods and can be matched to traces.
func TestLogTimestampsHaveMilliseconds(t *testing.T) {
	var buf bytes.Buffer
	log := newLogger(config{LogLevel: "info"}, &buf)
	log.Info().Msg("x")
	var l map[string]any
	if err := json.Unmarshal(buf.Bytes(), &l); err != nil {
		t.Fatal(err)
	}
	ts, _ := l["time"].(string)
	if _, err := time.Parse("2006-01-02T15:04:05.000Z07:00", ts); err != nil {
		t.Fatalf("time %q: %v", ts, err)
	}
}

func TestVersionFlagAndBuildInfo(t *testing.T) {
	defer func(v, r string) { version, revision = v, r }(version, revision)
	version, revision = "1.2.3", "abc123"
	var out bytes.Buffer
	if code := run([]string{"--version"}, &out, io.Discard); code != 0 {
		t.Fatalf("--version exit code %d", code)
	}
	if !strings.HasPrefix(out.String(), "aep-gateway 1.2.3 (revision abc123, go1.") {
		t.Fatalf("--version printed %q", out.String())
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newBuildInfoGauge())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{}
	for _, l := range mfs[0].GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if mfs[0].GetName() != "aep_build_info" || labels["version"] != "1.2.3" || labels["revision"] != "abc123" ||
		!strings.HasPrefix(labels["goversion"], "go1.") || mfs[0].GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Fatalf("build info = %v", mfs)
	}

	// Without -ldflags the toolchain's record is the fallback, never empty.
	version, revision = "", ""
	if v, r, _ := buildInfo(); v == "" || r == "" {
		t.Fatalf("buildInfo() = %q, %q", v, r)
	}
}

// startGateway runs the real server wiring (serve) on the embedded broker
// and returns its base URL; it stops when the test ends.
// Extra flags are appended to the defaults.
func startGateway(t *testing.T, extra ...string) string {
	t.Helper()
	base, _ := startGatewayLog(t, extra...)
	return base
}

// startGatewayLog is startGateway that also returns the gateway's log.
func startGatewayLog(t *testing.T, extra ...string) (string, *lockedLog) {
	t.Helper()
	cfg, err := parseConfig(append([]string{
		"--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--embedded-kafka-listen", "127.0.0.1:0",
		"--topic-partitions", "2", "--log-level", "info",
	}, extra...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sink := &lockedLog{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, zerolog.New(sink), func() {}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, l := range sink.lines() {
			if l["message"] == "aep-gateway serving" {
				return l["listen"].(string), sink
			}
		}
		select {
		case err := <-done:
			t.Fatalf("serve ended early: %v\n%s", err, sink.buf.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("gateway did not start:\n%s", sink.buf.String())
	return "", nil
}

func do(t *testing.T, method, url, contentType, body string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// exportedNames are the metric family names of a /metrics page.
func exportedNames(t *testing.T, base string) (map[string]bool, string) {
	t.Helper()
	resp := do(t, http.MethodGet, base+"/metrics", "", "")
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	names := map[string]bool{}
	for _, line := range strings.Split(string(page), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
		}
	}
	return names, string(page)
}

var labelArg = regexp.MustCompile(`,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)$`)

// dashboardMetrics are the metric names every PromQL expression of the
// dashboard uses: the chart's own JSON, as Grafana reads it.
func dashboardMetrics(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../../charts/aep-gateway/dashboards/aep-gateway.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		// label_values(metric, label): the label is no metric.
		exprs = append(exprs, labelArg.ReplaceAllString(v.Definition, ")"))
	}
	// Metric names: identifiers outside strings that are not PromQL
	// functions, keywords or label names (those stand inside {...} or after
	// by/without). Every metric this project exports starts with aep_, go_
	// or process_; anything else in an expression is a function or keyword.
	strip := regexp.MustCompile(`"(?:[^"\\]|\\.)*"|\{[^}]*\}|\b(?:by|without)\s*\([^)]*\)`)
	ident := regexp.MustCompile(`\b[a-zA-Z_:][a-zA-Z0-9_:]*\b`)
	known := regexp.MustCompile(`^(?:aep|go|process)_`)
	number := regexp.MustCompile(`^[0-9]`)
	funcs := map[string]bool{"sum": true, "rate": true, "histogram_quantile": true, "label_values": true, "max": true,
		"min": true, "avg": true, "count": true, "increase": true, "irate": true, "le": true, "topk": true}
	set := map[string]bool{}
	for _, e := range exprs {
		for _, id := range ident.FindAllString(strip.ReplaceAllString(e, " "), -1) {
			switch {
			case known.MatchString(id):
				set[id] = true
			case funcs[id], strings.HasPrefix(id, "__"), number.MatchString(id):
			default:
				t.Errorf("dashboard expression %q uses %q: neither a known function nor an aep_/go_/process_ metric", e, id)
			}
		}
	}
	if len(set) < 10 {
		t.Fatalf("only %d metric names found in the dashboard: %v", len(set), set)
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// recordingRegisterer notes the names of the metrics registered through it.
type recordingRegisterer struct {
	prometheus.Registerer
	names map[string]bool
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return r.Registerer.Register(c)
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// engineMetricNames are the aep_delivery_* names the delivery engine and
// the durable cluster register, with series per tenant (redeliveries, dead
// letters, lag) that appear only once a tenant has some.
func engineMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	rec := &recordingRegisterer{Registerer: prometheus.NewRegistry(), names: map[string]bool{}}
	opts := []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}
	eng, err := engine.NewEngine(engine.Config{ClientOpts: opts, Registerer: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	dc, err := durable.New(durable.Config{ClientOpts: opts, Registerer: rec}, eng)
	if err != nil {
		t.Fatal(err)
	}
	dc.Close()
	if !rec.names["aep_delivery_durable_lag_records"] {
		t.Fatalf("engine registered %v", rec.names)
	}
	if _, err := bridge.NewMetrics(rec); err != nil { // the bridges' series, registered where bridges run
		t.Fatal(err)
	}
	return rec.names
}

// kafkaMetricNames are the aep_kafka_* names newKafkaClientMetrics registers
// for a producer and a consumer client.
func kafkaMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	rec := &recordingRegisterer{Registerer: prometheus.NewRegistry(), names: map[string]bool{}}
	km := newKafkaClientMetrics(rec)
	for _, o := range []kgo.Opt{km.producer, km.consumer, km.consumer} { // two consumers share one set
		cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), o)
		if err != nil {
			t.Fatal(err)
		}
		cl.Close()
	}
	if !rec.names["aep_kafka_connect_errors_total"] {
		t.Fatalf("kprom registered %v", rec.names)
	}
	return rec.names
}

// Every metric the Grafana dashboard queries is exported by the gateway as
// the binary wires it (gateway, delivery engine, Kafka clients, build info),
// after traffic on both dialects and a stream: CI fails when a panel would
// stay empty because a metric was renamed or never existed.
func TestDashboardQueriesOnlyExportedMetrics(t *testing.T) {
	base := startGateway(t)

	// Traffic: an SSE stream, then an R event, a D event the stream receives,
	// and a refused D event (the refusal series).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/aep/events?types=task.*", nil)
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := stream.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("GET /aep/events: %d %s", stream.StatusCode, ct)
	}
	rEvent := `{"aep":"0.1","id":"01JX9YB0AAAA0000000000GOLD","type":"session.started","time":"2026-07-03T10:14:00Z","source":"aep://h/agent/a/session/s1","agent":"a","session":"s1","seq":0,"epoch":0,"data":{}}`
	dEvent := `{"aep_version":"0.1","id":"evt_01","type":"task.progress","source":"agent:r","session_id":"sess_01","created_at":"2026-07-09T10:00:00Z","payload":{}}`
	for _, c := range []struct {
		path, ctype, body string
		hdr               []string
	}{
		{"/events", "application/json", rEvent, []string{"AEP-Version", "0.1"}},
		{"/aep/events", "application/x-ndjson", dEvent, nil},
		// D answers 202 and rejects the event on its own.
		{"/aep/events", "application/x-ndjson", `{"aep_version":"0.1"}`, nil},
	} {
		resp := do(t, http.MethodPost, base+c.path, c.ctype, c.body, c.hdr...)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST %s: %d %s", c.path, resp.StatusCode, b)
		}
	}
	got := false
	for sc := bufio.NewScanner(stream.Body); !got && sc.Scan(); {
		got = strings.Contains(sc.Text(), "evt_01")
	}
	stream.Body.Close() // hang up: the stream's duration is observed
	if !got {
		t.Fatal("the stream did not deliver the D event")
	}

	var names map[string]bool
	var page string
	deadline := time.Now().Add(10 * time.Second)
	for {
		names, page = exportedNames(t, base)
		// The stream's duration is observed when its handler returns.
		if strings.Contains(page, `aep_http_stream_duration_seconds_count{route="/aep/events"} 1`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Labelled series appear on /metrics once something happened to them;
	// the Kafka client's error counters (connect, read, write errors) need a
	// failure. Those count when the gateway's Kafka client metrics register
	// them: the same constructor serve uses, on a recording registry.
	registered := kafkaMetricNames(t)
	for n := range engineMetricNames(t) {
		registered[n] = true
	}
	var missing []string
	for _, n := range dashboardMetrics(t) {
		base := n
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(n, suf); ok && names[b] {
				base = b
			}
		}
		if !names[base] && !registered[base] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("the dashboard queries metrics the gateway does not export: %v", missing)
	}

	// The histogram help is true: the SSE stream went to the stream
	// histogram, and only the two POSTs to the latency one.
	for _, want := range []string{
		`aep_http_stream_duration_seconds_count{route="/aep/events"} 1`,
		`aep_http_request_duration_seconds_count{route="/aep/events"} 2`,
		`aep_kafka_connects_total{client="producer",node_id=`,
		`aep_kafka_connects_total{client="consumer",node_id=`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", page)
	}
}

// gaugeValue is the value of a gauge series with client=role.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name, role string) float64 {
	t.Helper()
	v, _, ok := gatewaytest.MetricSeries(t, reg, name, map[string]string{"client": role})
	if !ok {
		t.Fatalf("no %s{client=%q}", name, role)
	}
	return v
}

// Clients of one role share their series: a second client neither panics
// on registration nor hides the first, closing one keeps the series, and the
// buffered gauges add up the role's open clients.
func TestKafkaClientMetricsShareOneRole(t *testing.T) {
	reg := prometheus.NewRegistry()
	km := newKafkaClientMetrics(reg)
	newClient := func() *kgo.Client {
		// Nothing listens there: produced records stay buffered.
		cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), km.consumer)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	c1, c2 := newClient(), newClient()
	defer c2.Close()
	ctx := context.Background()
	for i := range 5 {
		cl := c1
		if i >= 3 {
			cl = c2
		}
		cl.Produce(ctx, &kgo.Record{Topic: "t", Value: []byte("v")}, nil)
	}
	const name = "aep_kafka_buffered_produce_records"
	if got := gaugeValue(t, reg, name, "consumer"); got != 5 {
		t.Fatalf("%s = %v with 3 + 2 buffered, want 5", name, got)
	}
	c1.Close() // fails its 3 records
	if got := gaugeValue(t, reg, name, "consumer"); got != 2 {
		t.Fatalf("%s = %v after closing the first client, want 2", name, got)
	}
	if got := gaugeValue(t, reg, "aep_kafka_buffered_fetch_bytes", "consumer"); got != 0 {
		t.Fatalf("buffered fetch bytes = %v, want 0", got)
	}
}
