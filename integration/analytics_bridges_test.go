package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// EnvAnalyticsReport names the file the analytics tests append their
// figures to (CI prints it: go test hides a passing test's log).
const EnvAnalyticsReport = "AEP_IT_ANALYTICS_REPORT"

var (
	otelcolOnce sync.Once
	otelcolPath string
	otelcolErr  error
)

// otelcolBinary is the OpenTelemetry Collector of integration/otelcol:
// AEP_OTELCOL when set (.ci/run builds it), else built here. A failed
// build skips the test unless AEP_OTELCOL_REQUIRED=1 (CI).
func otelcolBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("AEP_OTELCOL"); p != "" {
		return p
	}
	otelcolOnce.Do(func() {
		dir, err := os.MkdirTemp("", "aep-otelcol-")
		if err != nil {
			otelcolErr = err
			return
		}
		otelcolPath = filepath.Join(dir, "otelcol")
		if out, err := exec.Command("go", "build", "-C", "otelcol", "-o", otelcolPath, ".").CombinedOutput(); err != nil {
			otelcolErr = fmt.Errorf("building the collector: %v\n%s", err, out)
		}
	})
	if otelcolErr != nil {
		if os.Getenv("AEP_OTELCOL_REQUIRED") == "1" {
			t.Fatal(otelcolErr)
		}
		t.Skip(otelcolErr)
	}
	return otelcolPath
}

// collector is a running OpenTelemetry Collector: an OTLP/HTTP receiver on
// addr whose logs the file exporter writes to out, one request per line.
type collector struct {
	cmd    *exec.Cmd
	exited chan struct{}
	out    string
}

func startCollector(t *testing.T, bin, addr, out string) *collector {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "otelcol.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `receivers:
  otlp:
    protocols:
      http:
        endpoint: %s
exporters:
  file:
    path: %s
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    logs:
      receivers: [otlp]
      exporters: [file]
`, addr, out), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &collector{cmd: exec.Command(bin, "--config", cfg), exited: make(chan struct{}), out: out}
	logs := &syncBuffer{}
	c.cmd.Stdout, c.cmd.Stderr = logs, logs
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() {
		c.stop()
		if t.Failed() {
			t.Logf("collector log:\n%s", logs.String())
		}
	})
	if !gatewaytest.Eventually(60*time.Second, 100*time.Millisecond, func() bool {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			_ = conn.Close()
		}
		return err == nil
	}) {
		t.Fatalf("the collector did not listen on %s:\n%s", addr, logs.String())
	}
	return c
}

// stop ends the collector gracefully (it flushes what it accepted).
func (c *collector) stop() {
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// exported reads the LogRecords of the collector's output files.
func exported(t *testing.T, files ...string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, f := range files {
		fh, err := os.Open(f)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			recs, err := gatewaytest.OTLPLogsToPins(sc.Bytes())
			if err != nil {
				continue // a line being written
			}
			out = append(out, recs...)
		}
		_ = fh.Close()
	}
	return out
}

// freeAddr is a loopback address with a port free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// readCommittedTopic reads count records of a topic with read_committed.
func readCommittedTopic(t *testing.T, seeds []string, topic string, count int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.MetadataMinAge(200*time.Millisecond), kgo.MetadataMaxAge(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	deadline := time.Now().Add(90 * time.Second)
	for len(out) < count && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		out = append(out, cl.PollFetches(ctx).Records()...)
		cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // and nothing more
	out = append(out, cl.PollFetches(ctx).Records()...)
	cancel()
	return out
}

func canonJSON(t *testing.T, v any) string {
	t.Helper()
	if b, ok := v.([]byte); ok {
		var x any
		if err := json.Unmarshal(b, &x); err != nil {
			t.Fatal(err)
		}
		v = x
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The three AEP-0005 bridges through the built binaries, on the suite's
// broker (real Apache Kafka in CI), with a real OpenTelemetry Collector as
// the OTLP receiver: the golden events published to a gateway come out of
// the CloudEvents topic, the collector and the OCSF topic equal to the
// spec's pinned projections; then, with a publisher running, the
// collector is down for 10 s mid-run and every event still reaches it
// exactly once, the bridge's retries counted.
func TestAnalyticsBridgesThroughTheBinary(t *testing.T) {
	bin := otelcolBinary(t)
	b := StartBroker(t)
	prefix := strings.ReplaceAll(TopicName(t), "_", "-")
	naming := partitioning.Naming{Template: prefix + ".{tenant}.events"}
	common := []string{"--kafka-brokers", strings.Join(b.Seeds, ","), "--topic-template", naming.Template,
		"--topic-partitions", "3", "--topic-replication-factor", "1"}
	addr := freeAddr(t)
	dir := t.TempDir()
	out1, out2 := filepath.Join(dir, "logs-1.jsonl"), filepath.Join(dir, "logs-2.jsonl")
	col := startCollector(t, bin, addr, out1)
	g := startGateway(t, common...)
	br := startGateway(t, append([]string{"--role", "bridge", "--node-id", "bridges-1",
		"--cloudevents-bridge", "--cloudevents-max-capture", "full", "--cloudevents-bridge-group", prefix + "-ce",
		"--ocsf-bridge", "--ocsf-bridge-group", prefix + "-ocsf",
		"--otlp-logs-endpoint", "http://" + addr + "/v1/logs", "--otlp-logs-group", prefix + "-otlp", "--otlp-logs-timeout", "5s"}, common...)...)

	// 1. the golden events, projected as pinned
	golden := gatewaytest.FixtureLines(t, "../aep/testdata/r-golden.jsonl")
	var body strings.Builder
	for _, g := range golden {
		body.Write(g)
		body.WriteByte('\n')
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if res, err := g.post(ctx, "/events", "application/x-ndjson", map[string]string{"AEP-Version": "0.1"}, body.String()); err != nil || res.status != 202 {
		t.Fatalf("publish golden: %v %d %s", err, res.status, res.body)
	}
	ces := gatewaytest.FixtureLines(t, "../aep/testdata/r-ce-expected.jsonl")
	gotCE := map[string]bool{}
	for _, r := range readCommittedTopic(t, b.Seeds, naming.CloudEvents("default"), len(golden)) {
		gotCE[canonJSON(t, r.Value)] = true
	}
	for i, ce := range ces {
		if !gotCE[canonJSON(t, ce)] {
			t.Errorf("golden %d: its pinned CloudEvent is not in the CloudEvents topic", i)
		}
	}
	ocsfPins := gatewaytest.FixturePins(t, "../aep/testdata/r-ocsf-expected.json", 8)
	gotOCSF := map[string]bool{}
	ocsfRecs := readCommittedTopic(t, b.Seeds, naming.OCSF("default"), len(ocsfPins))
	for _, r := range ocsfRecs {
		gotOCSF[canonJSON(t, r.Value)] = true
	}
	for k, pin := range ocsfPins {
		if !gotOCSF[canonJSON(t, []byte(pin))] {
			t.Errorf("OCSF pin %s is not in the OCSF topic", k)
		}
	}
	otlpPins := gatewaytest.FixturePins(t, "../aep/testdata/r-otlp-expected.json", 4)
	var logs []map[string]any
	if !gatewaytest.Eventually(60*time.Second, 200*time.Millisecond, func() bool {
		logs = exported(t, out1)
		return len(logs) >= len(golden)
	}) {
		t.Fatalf("%d of %d golden events at the collector", len(logs), len(golden))
	}
	gotOTLP := map[string]bool{}
	byID := map[string]string{}
	for _, r := range logs {
		res := map[string]any{}
		for k, v := range r["resource"].(map[string]any) {
			res[k] = v
		}
		if res["aep.tenant"] != "default" {
			t.Errorf("resource %v: want aep.tenant default", res)
		}
		delete(res, "aep.tenant")
		r["resource"] = res
		gotOTLP[canonJSON(t, r)] = true
		id, _ := r["attributes"].(map[string]any)["aep.event_id"].(string)
		byID[id] = canonJSON(t, r)
	}
	for k, pin := range otlpPins {
		if !gotOTLP[canonJSON(t, []byte(pin))] {
			var p struct {
				Attributes struct {
					ID string `json:"aep.event_id"`
				} `json:"attributes"`
			}
			_ = json.Unmarshal(pin, &p)
			t.Errorf("OTLP pin %s is not at the collector:\n got %s\nwant %s", k, byID[p.Attributes.ID], canonJSON(t, []byte(pin)))
		}
	}
	golden1 := fmt.Sprintf("bridges through the binary: golden events as %d CloudEvents, %d OCSF records (%d pinned), %d OTLP LogRecords at the collector (%d pinned), every pin found",
		len(ces), len(ocsfRecs), len(ocsfPins), len(logs), len(otlpPins))
	t.Log(golden1)

	// 2. a 10 s collector outage while a publisher runs
	const want = 3000
	published := make(chan error, 1)
	third := make(chan struct{})
	go func() {
		for i := 0; i < want; i += 25 {
			var batch []string
			for j := i; j < i+25; j++ {
				batch = append(batch, rEvent(fmt.Sprintf("ot_s%02d", j%20), j))
			}
			res, err := g.post(ctx, "/events", "application/x-ndjson", map[string]string{"AEP-Version": "0.1"}, strings.Join(batch, "\n")+"\n")
			if err != nil || res.status != 202 {
				published <- fmt.Errorf("publish: %v %d %s", err, res.status, res.body)
				return
			}
			if i+25 == want/3 {
				close(third)
			}
			time.Sleep(50 * time.Millisecond) // ~500 events/s for 6 s
		}
		published <- nil
	}()
	<-third
	col.stop()
	down := time.Now()
	time.Sleep(10 * time.Second)
	startCollector(t, bin, addr, out2)
	outage := time.Since(down).Round(time.Millisecond)
	t.Logf("collector down for %v", outage)
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	if !gatewaytest.Eventually(90*time.Second, 500*time.Millisecond, func() bool {
		counts = map[string]int{}
		for _, r := range exported(t, out1, out2) {
			if id, _ := r["attributes"].(map[string]any)["aep.event_id"].(string); strings.HasPrefix(id, "01JX9YB0OT_S") {
				counts[id]++
			}
		}
		return len(counts) >= want
	}) {
		t.Fatalf("%d of %d events at the collector after the outage", len(counts), want)
	}
	time.Sleep(2 * time.Second) // nothing more comes
	counts = map[string]int{}
	for _, r := range exported(t, out1, out2) {
		if id, _ := r["attributes"].(map[string]any)["aep.event_id"].(string); strings.HasPrefix(id, "01JX9YB0OT_S") {
			counts[id]++
		}
	}
	missing, twice := 0, 0
	for i := range want {
		switch counts[fmt.Sprintf("01JX9YB0%s%06d", strings.ToUpper(fmt.Sprintf("ot_s%02d", i%20)), i)] {
		case 0:
			missing++
		case 1:
		default:
			twice++
		}
	}
	retries := metricSum(t, br, "aep_bridge_retries_total", `bridge="otlp"`)
	dups := metricSum(t, br, "aep_bridge_possible_duplicates_total", `bridge="otlp"`)
	written := metricSum(t, br, "aep_bridge_records_total", `bridge="otlp"`, `outcome="written"`)
	t.Logf("OTLP after a 10 s outage: %d events, missing %d, more than once %d; bridge retries %v, possible duplicates %v, written %v",
		want, missing, twice, retries, dups, written)
	if missing != 0 || twice != 0 {
		t.Fatalf("not exactly once at the collector: %d missing, %d more than once", missing, twice)
	}
	if !t.Failed() {
		appendReport(t, EnvAnalyticsReport, golden1)
		appendReport(t, EnvAnalyticsReport, fmt.Sprintf("OTLP logs across a %v collector outage: %d events, missing %d, more than once %d; retries %v",
			outage, want, missing, twice, retries))
	}
	if retries == 0 {
		t.Fatal("no retry counted across the outage")
	}
	if lag := metricSum(t, br, "aep_bridge_lag_records", `bridge="otlp"`); lag != 0 {
		t.Errorf("OTLP lag %v after everything was exported", lag)
	}
}
