package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// duckdbBinary is the DuckDB CLI: AEP_DUCKDB, else duckdb on PATH. Without
// one the test skips, unless AEP_DUCKDB_REQUIRED=1 (CI installs it).
func duckdbBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("AEP_DUCKDB"); p != "" {
		return p
	}
	if p, err := exec.LookPath("duckdb"); err == nil {
		return p
	}
	if os.Getenv("AEP_DUCKDB_REQUIRED") == "1" {
		t.Fatal("no DuckDB CLI (AEP_DUCKDB) and AEP_DUCKDB_REQUIRED=1")
	}
	t.Skip("no DuckDB CLI: set AEP_DUCKDB or put duckdb on PATH (pip install duckdb-cli)")
	return ""
}

// quickstartSQL is the SQL block of docs/analytics.md's quickstart, between
// its markers: the test runs what the reader copies.
func quickstartSQL(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/analytics.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- quickstart.sql: tested by integration/TestAnalyticsQuickstart -->\n```sql\n")
	sql, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/analytics.md: the quickstart's SQL block is not where the test looks for it")
	}
	return sql
}

// docs/analytics.md's quickstart, step by step through the built
// binaries: a gateway with its embedded broker and the CloudEvents bridge,
// the golden events posted, `aepctl export` of the CloudEvents topic, and
// the page's SQL run by the DuckDB CLI; its answers must be what the
// events say (counted here in Go from the same file).
func TestAnalyticsQuickstart(t *testing.T) {
	duckdb := duckdbBinary(t)
	dir := t.TempDir()
	g := startGateway(t, "--data-dir", filepath.Join(dir, "data"), "--embedded-kafka-listen", "127.0.0.1:0",
		"--cloudevents-bridge", "--cloudevents-max-capture", "full", "--node-id", "quickstart")
	golden := gatewaytest.FixtureLines(t, "../aep/testdata/r-golden.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	body := string(bytes.Join(golden, []byte("\n"))) + "\n"
	if res, err := g.post(ctx, "/events", "application/x-ndjson", map[string]string{"AEP-Version": "0.1"}, body); err != nil || res.status != 202 {
		t.Fatalf("publish: %v %d %s", err, res.status, res.body)
	}
	file := filepath.Join(dir, "events.jsonl")
	var out []byte
	if !gatewaytest.Eventually(60*time.Second, 500*time.Millisecond, func() bool {
		var err error
		out, err = exec.CommandContext(ctx, aepctlBinary(t), "export", "--tenant", "default", "--brokers", g.KafkaAddr,
			"--from", "cloudevents", "--out", file).CombinedOutput()
		lines, _ := os.ReadFile(file)
		return err == nil && bytes.Count(lines, []byte("\n")) == len(golden)
	}) {
		t.Fatalf("aepctl export never wrote the %d CloudEvents: %s", len(golden), out)
	}
	t.Logf("aepctl export: %s", bytes.TrimSpace(out))

	cmd := exec.CommandContext(ctx, duckdb, "-csv")
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(quickstartSQL(t))
	res, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("duckdb: %v\n%s", err, res)
	}
	t.Logf("duckdb answered:\n%s", res)

	// the same answers, from the events
	types := map[string]int{}
	type key struct{ agent, tool string }
	type calls struct{ calls, failed, ms int }
	tools := map[key]*calls{}
	for _, g := range golden {
		var ev struct {
			Type, Agent string
			Data        struct {
				Tool struct {
					Name string `json:"name"`
				} `json:"tool"`
				DurationMs int `json:"duration_ms"`
			} `json:"data"`
		}
		if err := json.Unmarshal(g, &ev); err != nil {
			t.Fatal(err)
		}
		types["dev.aep."+ev.Type]++
		if ev.Type == "tool.completed" || ev.Type == "tool.failed" {
			k := key{ev.Agent, ev.Data.Tool.Name}
			if tools[k] == nil {
				tools[k] = &calls{}
			}
			tools[k].calls++
			tools[k].ms += ev.Data.DurationMs
			if ev.Type == "tool.failed" {
				tools[k].failed++
			}
		}
	}
	var typeRows []string
	for ty, n := range types {
		typeRows = append(typeRows, fmt.Sprintf("%06d %s", 1000000-n, ty))
	}
	sort.Strings(typeRows)
	want := "type,events\n"
	for _, r := range typeRows[:5] {
		var n int
		var ty string
		_, _ = fmt.Sscanf(r, "%d %s", &n, &ty)
		want += fmt.Sprintf("%s,%d\n", ty, 1000000-n)
	}
	var keys []key
	for k := range tools {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if tools[keys[i]].calls != tools[keys[j]].calls {
			return tools[keys[i]].calls > tools[keys[j]].calls
		}
		return keys[i].tool < keys[j].tool
	})
	want += "agent,tool,calls,failed,total_ms\n"
	for _, k := range keys {
		c := tools[k]
		want += fmt.Sprintf("%s,%s,%d,%d,%d\n", k.agent, k.tool, c.calls, c.failed, c.ms)
	}
	if len(keys) < 2 {
		t.Fatalf("the golden events hold %d tool rows: the check would be weak", len(keys))
	}
	if string(res) != want {
		t.Fatalf("duckdb's answers differ from the events':\n got %s\nwant %s", res, want)
	}
	appendReport(t, EnvAnalyticsReport, fmt.Sprintf("docs/analytics.md quickstart: %s; DuckDB's answers equal the events' counts (%d tool rows)",
		bytes.TrimSpace(out), len(keys)))
}
