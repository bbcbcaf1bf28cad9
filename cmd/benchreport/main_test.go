package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSpliceReplacesOnlyTheGeneratedSection(t *testing.T) {
	doc := "# B\n\nhand-written\n"
	once := splice(doc, "one\n")
	if !strings.HasPrefix(once, doc) || !strings.Contains(once, beginMark+"\none\n"+endMark) {
		t.Fatalf("append:\n%s", once)
	}
	twice := splice(once+"\ntrailer\n", "two\n")
	if strings.Contains(twice, "one\n") || !strings.Contains(twice, "two\n") || !strings.Contains(twice, "trailer") ||
		!strings.HasPrefix(twice, doc) || strings.Count(twice, beginMark) != 1 {
		t.Fatalf("replace:\n%s", twice)
	}
}

func TestReportFromBenchOutputs(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	files := map[string]string{
		"meta.json":            `{"commit":"abc","date":"2026-12-02","machine":"2 cores","kafka":"k","knobs":{"BENCH_DURATION":"1s"}}`,
		"ingest-100.json":      `{"concurrency":8,"batch":100,"load_average":"1 2 3","gateway":{"accepted_per_sec":150000},"baseline":{"accepted_per_sec":300000},"ratio_gateway_kafka":0.5}`,
		"ingest-1.json":        `{"concurrency":64,"batch":1,"load_average":"1 2 3","gateway":{"accepted_per_sec":12000},"baseline":{"accepted_per_sec":20000},"ratio_gateway_kafka":0.6,"baseline_routed":{"accepted_per_sec":16000},"ratio_gateway_kafka_routed":0.75,"baseline_http":{"accepted_per_sec":15000},"ratio_gateway_http_floor":0.8}`,
		"ingest-ws-r-16.json":  `{"concurrency":8,"batch":16,"load_average":"2 2 2","gateway":{"accepted_per_sec":30000},"baseline":{"accepted_per_sec":120000},"ratio_gateway_kafka":0.25}`,
		"ingest-emb-1000.json": `{"concurrency":8,"batch":1000,"load_average":"3 2 1","gateway":{"accepted_per_sec":400000},"baseline":{"accepted_per_sec":500000},"ratio_gateway_kafka":0.8,"cpu_ratio_kafka_gateway":0.45}`,
		"fanout.json": `{"load_average":"4 5 6","runs":[
			{"peer":"gateway","transport":"sse","subscribers":100,"deliveries":300000,"cpu_ns":1000000000},
			{"peer":"centrifugo","transport":"sse","subscribers":100,"deliveries":200000,"cpu_ns":1000000000},
			{"peer":"gateway","transport":"sse","subscribers":1000,"deliveries":100000,"cpu_ns":1000000000},
			{"peer":"centrifugo","transport":"sse","subscribers":1000,"deliveries":100000,"cpu_ns":1000000000,"missing":-700000,"publish_retries":7}]}`,
		"fanout-single.json": `{"load_average":"2 2 2","runs":[
			{"peer":"gateway","transport":"sse","subscribers":10,"deliveries":40000,"cpu_ns":2000000000,"batch":1,"publishers":8,"broker":"kafka","broker_cpu_ns":2000000000},
			{"peer":"centrifugo","transport":"sse","subscribers":10,"deliveries":50000,"cpu_ns":1000000000,"batch":1,"publishers":8},
			{"peer":"gateway","transport":"sse","subscribers":1000,"deliveries":900000,"cpu_ns":1000000000,"batch":1,"publishers":8}]}`,
		"fanout-emb.json": `{"load_average":"3 3 3","runs":[
			{"peer":"gateway","transport":"sse","subscribers":100,"deliveries":300000,"cpu_ns":1000000000,"batch":1,"publishers":8,"broker":"embedded"},
			{"peer":"centrifugo","transport":"sse","subscribers":100,"deliveries":100000,"cpu_ns":1000000000,"batch":1,"publishers":8}]}`,
		"latency.json": `{"load_average":"7 8 9","runs":[
			{"path":"gateway","rate":1000,"latency_ms":{"p50":3,"p90":4,"p99":6}},
			{"path":"direct","rate":1000,"latency_ms":{"p50":2,"p90":3,"p99":4}}]}`,
		"idle.json": `{"load_average":"1 1 1","runs":[
			{"peer":"gateway","transport":"sse","connections":10000,"rss_open":600000000,"rss_per_connection":61440,"storm_peak":900000000},
			{"peer":"centrifugo","transport":"sse","connections":10000,"rss_open":500000000,"rss_per_connection":53248,"storm_peak":500000000}]}`,
		"resume.txt": "BenchmarkSSEResumePartitionSize/partition=10k-2 20 5000000 ns/op 4720000 first-data-ns/op\n" +
			"BenchmarkSSEResumePartitionSize/partition=1M-2 20 7000000 ns/op 6490000 first-data-ns/op\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(in, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	doc := filepath.Join(out, "benchmarks.md")
	if err := run(in, doc, filepath.Join(out, "images")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{
		"| batched ingest, 100 events/request, conc. 8, real Kafka | 150.0k ev/s | franz-go direct produce 300.0k | 0.50 | ≥ 0.7 | not met |",
		"| one event per request, conc. 64, real Kafka | 12.0k ev/s | franz-go direct produce 20.0k; the same producer writing the gateway's records (key, routing headers) 16.0k = 0.80 of direct, gateway/that 0.75; an HTTP server that only reads the requests and answers 202 15.0k = 0.75 of direct, gateway/that 0.80 | 0.60 | ≥ 0.5 | met |",
		"| batched ingest, 1000 events/request, conc. 8, embedded broker | 400.0k ev/s | franz-go direct produce 500.0k (CPU time per event, direct over gateway: 0.45) | 0.80 | ≥ 0.7 | met |",
		"ingest emb-1000: 3 2 1;",
		"| WebSocket R, one event a message, a ping after 16, 8 connections, real Kafka (direct: batches of 16) | 30.0k ev/s | franz-go direct produce 120.0k | 0.25 | - | - |",
		"ingest ws-r-16: 2 2 2;",
		"→ 100 SSE subscribers, saturated, deliveries per CPU-second | 300.0k | Centrifugo v6.9.1 uni_sse 200.0k | 1.50 | ≥ 1.5 | met |",
		"idle SSE connection, RSS per connection at 10.0k | 60.0 KB | Centrifugo 52.0 KB | 1.15 | ≤ 16 KB | not met |",
		"+50.0% (572 → 858 MB)",
		"+2.00 ms (p99 6.00 ms; p50 3.00 ms, +1.00 ms over direct) | direct p99 4.00 ms, p50 2.00 ms |  | ≤ 3 ms | met |",
		"| 6.49 vs 4.72 ms (medians) |  | 1.38 | ≤ 1.2 | not met |",
		"| 1 event/publish, 8 publishers → 10 SSE subscribers, real Kafka | 20.0k | 2.00 s | 10.0k | 50.0k | 0.40 | 0.20 | 2 2 2 |",
		"| 1 event/publish, 8 publishers → 1000 SSE subscribers, real Kafka | 900.0k | not measured (no broker pid) | n/a | not run | n/a | n/a | 2 2 2 |",
		"| batched publishes → 100 SSE subscribers, real Kafka | 300.0k | not measured (no broker pid) | n/a | 200.0k | 1.50 | n/a | 4 5 6 |",
		"| 1 event/publish, 8 publishers → 100 SSE subscribers, embedded broker | 300.0k | in the gateway process (embedded) | 300.0k | 100.0k | 3.00 | 3.00 | 3 3 3 |",
		"fan-out: 4 5 6", "uni_sse 100.0k (7 publishes resent after no answer: 700.0k duplicate deliveries counted) | 1.00 |", "](images/bench-fanout.svg)", "](images/bench-latency.svg)", "](images/bench-ingest.svg)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	for _, f := range []string{"bench-fanout.svg", "bench-latency.svg", "bench-ingest.svg"} {
		svg, err := os.ReadFile(filepath.Join(out, "images", f))
		if err != nil || !strings.Contains(string(svg), "<svg") {
			t.Errorf("%s: %v, not an SVG", f, err)
		}
	}
}
