package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metricSum adds every series of the gateway's /metrics whose name (with
// labels cut off) is name and whose labels contain each of labels (e.g.
// le="0.5", bridge="otlp").
func metricSum(t *testing.T, g *gatewayProc, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get(g.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, v, ok := strings.Cut(line, " ")
		n, set, _ := strings.Cut(series, "{")
		if !ok || n != name {
			continue
		}
		for _, l := range labels {
			ok = ok && strings.Contains(set, l)
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if ok && err == nil {
			sum += f
		}
	}
	return sum
}

// histogramQuantiles bounds the p50 and p99 of a histogram from above by
// its bucket bounds (the smallest bound holding that share of the count).
func histogramQuantiles(t *testing.T, g *gatewayProc, name string) (count float64, p50, p99 string) {
	t.Helper()
	resp, err := http.Get(g.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	type bucket struct {
		le float64
		n  float64
	}
	var bs []bucket
	for _, line := range strings.Split(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, name+`_bucket{le="`)
		if !ok {
			continue
		}
		le, v, _ := strings.Cut(rest, `"} `)
		n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
		b := bucket{n: n}
		if le == "+Inf" {
			b.le = 1e9
		} else {
			b.le, _ = strconv.ParseFloat(le, 64)
		}
		bs = append(bs, b)
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	if len(bs) == 0 || bs[len(bs)-1].n == 0 {
		return 0, "-", "-"
	}
	count = bs[len(bs)-1].n
	q := func(share float64) string {
		for _, b := range bs {
			if b.n >= share*count {
				return fmt.Sprintf("<= %v", time.Duration(b.le*float64(time.Second)))
			}
		}
		return "-"
	}
	return count, q(0.5), q(0.99)
}

// The per-subscription cost of open durable streams on one gateway: heap
// in use per open stream, and Kafka requests per second per stream while
// nothing is published. Run it against a baseline binary with
// AEP_GATEWAY_BIN to compare (docs/durable-cluster.md quotes both);
// measurement only, so it runs when AEP_TEST_MEASURE is set.
func TestDurableStreamCost(t *testing.T) {
	if os.Getenv("AEP_TEST_MEASURE") == "" {
		t.Skip("a measurement: set AEP_TEST_MEASURE=1")
	}
	const k = 40
	idle := 15 * time.Second
	t.Setenv("GOGC", "5") // the gateways' heap in use then stays near their live heap
	c := newDurableCluster(t, 1, `{"types":["task.*"]}`)
	g := c.nodes[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ids := []string{c.subID}
	for len(ids) < k {
		r, err := g.post(ctx, "/aep/subscriptions", "application/json", nil, `{"types":["task.*"]}`)
		var created struct {
			ID string `json:"subscription_id"`
		}
		if err != nil || r.status != http.StatusCreated || json.Unmarshal(r.body, &created) != nil {
			t.Fatalf("create: %v %d %s", err, r.status, r.body)
		}
		ids = append(ids, created.ID)
	}
	time.Sleep(3 * time.Second)
	heap0 := metricSum(t, g, "go_memstats_heap_inuse_bytes")
	req0 := metricSum(t, g, "aep_kafka_request_duration_e2e_seconds_count")
	time.Sleep(idle)
	reqIdle := (metricSum(t, g, "aep_kafka_request_duration_e2e_seconds_count") - req0) / idle.Seconds()
	for _, id := range ids {
		resp, err := openDurableStream(ctx, g, id)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = io.Copy(io.Discard, resp.Body); resp.Body.Close() }()
	}
	time.Sleep(5 * time.Second)
	heap1 := metricSum(t, g, "go_memstats_heap_inuse_bytes")
	req1 := metricSum(t, g, "aep_kafka_request_duration_e2e_seconds_count")
	time.Sleep(idle)
	reqOpen := (metricSum(t, g, "aep_kafka_request_duration_e2e_seconds_count") - req1) / idle.Seconds()
	t.Logf("%d open durable streams, idle: heap in use %+.0f KiB per stream (%.1f MiB -> %.1f MiB); Kafka requests/s: %.2f without streams, %.2f with them = %.3f per stream",
		k, (heap1-heap0)/k/1024, heap0/(1<<20), heap1/(1<<20), reqIdle, reqOpen, (reqOpen-reqIdle)/k)
}

// Throughput of one durable stream through the binary: n events published,
// streamed and acknowledged (batches of 500, to the serving node), timed
// from the first publish to the last ack answered. Run it against a
// baseline binary with AEP_GATEWAY_BIN; measurement only (AEP_TEST_MEASURE).
func TestDurableStreamThroughput(t *testing.T) {
	if os.Getenv("AEP_TEST_MEASURE") == "" {
		t.Skip("a measurement: set AEP_TEST_MEASURE=1")
	}
	const n = 20000
	c := newDurableCluster(t, 1, `{"types":["task.*"],"ack_timeout_ms":60000}`)
	g := c.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	resp, err := c.openStream(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	start := time.Now()
	go func() {
		for from := 0; from < n; from += 1000 {
			var body strings.Builder
			for i := from; i < from+1000; i++ {
				body.WriteString(dEvent(i, fmt.Sprintf("sess_%d", i%50)) + "\n")
			}
			if r, err := g.post(ctx, "/aep/events", "application/x-ndjson", nil, body.String()); err != nil || r.status != http.StatusAccepted {
				t.Errorf("publish: %v %d", err, r.status)
				cancel()
				return
			}
		}
	}()
	var batch []string
	acked := 0
	flush := func() {
		if r, err := g.post(ctx, "/aep/subscriptions/"+c.subID+"/acks", "application/json", nil, ackBatch(batch)); err != nil || r.status != http.StatusOK {
			t.Fatalf("acks: %v %d %s", err, r.status, r.body)
		}
		acked += len(batch)
		batch = batch[:0]
	}
	readEvents(resp.Body, func(id string, _ bool) bool {
		batch = append(batch, id)
		if len(batch) == 500 {
			flush()
		}
		return acked >= n
	})
	if acked < n {
		t.Fatalf("%d of %d acknowledged", acked, n)
	}
	el := time.Since(start)
	t.Logf("%d events published, streamed and acknowledged in %v: %.0f events/s", n, el, n/el.Seconds())
}
