package integration

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// catchUpStreamBound is the memory one catching-up stream may hold, as
// docs/security.md states it: its reader's one fetch in flight
// (engine.DefaultReaderFetchBytes, 256 KiB compressed) as records, decoded, plus its
// queue of events (engine.DefaultQueue, 256) and its client's buffers.
const catchUpStreamBound = 3 << 20

// envInt reads a positive integer knob, or def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q", name, v)
	}
	return n
}

// Replayable streams that catch up from a cursor over a large topic and
// never read: the gateway's memory is bounded by the number of streams,
// not by the topic (each stream's Kafka reader holds at most one bounded
// fetch), and it is released when they go. Default: 20 streams over 20
// MiB; the figure is AEP_CATCHUP_STREAMS=200 AEP_CATCHUP_MIB=300.
func TestCatchUpMemoryIsBoundedPerStream(t *testing.T) {
	streams := envInt(t, "AEP_CATCHUP_STREAMS", 20)
	mib := envInt(t, "AEP_CATCHUP_MIB", 20)
	dir := t.TempDir()
	g := startGateway(t, "--data-dir", dir+"/data", "--embedded-kafka-listen", "127.0.0.1:0",
		"--topic-partitions", "4", "--max-connections-per-ip", "0", "--max-streams-per-tenant", "0")
	pid := g.cmd.Process.Pid
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// A cursor at the start: the first event's id on a live stream.
	live := gatewaytest.MustOpenSSE(t, g.URL+"/aep/events?types=*", gatewaytest.SSEOptions{Buffer: 16})
	first := `{"aep_version":"0.1","id":"evt_first","type":"task.progress","source":"agent:mem","session_id":"s0","created_at":"2026-07-09T10:00:00Z","payload":{}}`
	if r, err := g.post(ctx, "/aep/events", "application/x-ndjson", nil, first); err != nil || r.status != http.StatusAccepted {
		t.Fatalf("publish: %v %+v", err, r)
	}
	msgs := live.Until("the first event", func(m gatewaytest.SSEMessage) bool { return m.Event == "task.progress" })
	from := msgs[len(msgs)-1].ID
	live.Close()

	// The topic: mib MiB of 1 KiB events, written straight to the broker,
	// as compressible as real events (hex of random bytes, about 2x under
	// lz4), not runs of one byte: a fetch is bounded in compressed bytes
	// (see docs/security.md).
	fillTenant(ctx, t, g.KafkaAddr, mib<<10, 430, kgo.ProducerLinger(5*time.Millisecond))

	rss := func() int64 { return procStatus(pid, "VmRSS") << 10 }
	time.Sleep(time.Second) // let the broker's and the gateway's allocations settle
	base := rss()

	// streams replayable readers from the first cursor that never read.
	q := url.Values{"types": {"*"}, "delivery_mode": {"replayable"}, "from_cursor": {from}}
	tr := &http.Transport{MaxIdleConnsPerHost: streams, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var resps []*http.Response
	for range streams {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/aep/events?"+q.Encode(), nil)
		resp, err := hc.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("stream: %v %v", err, resp)
		}
		resps = append(resps, resp) // headers only: the body is never read
	}
	peak := base
	deadline := time.Now().Add(8 * time.Second) // within the streams' 10 s write timeout
	for time.Now().Before(deadline) {
		peak = max(peak, rss())
		time.Sleep(100 * time.Millisecond)
	}
	grown := peak - base
	bound := int64(streams)*catchUpStreamBound + 64<<20
	t.Logf("%d never-reading streams over %d MiB: RSS %d MiB idle, peak %d MiB (+%d MiB, %.2f MiB per stream; bound %d MiB)",
		streams, mib, base>>20, peak>>20, grown>>20, float64(grown)/float64(streams)/(1<<20), bound>>20)
	if grown > bound {
		t.Fatalf("catching-up streams grew RSS by %d MiB, over the bound of %d MiB", grown>>20, bound>>20)
	}
	for _, r := range resps {
		r.Body.Close()
	}
	// Released: the open streams gauge returns to zero, and the heap with it.
	gatewaytest.Poll(t, "the streams to end", func() bool {
		v, ok := metricValue(t, g, "aep_delivery_subscriptions")
		return ok && v == 0
	})
}

// metricValue reads one unlabelled series from the gateway's /metrics.
func metricValue(t *testing.T, g *gatewayProc, name string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(g.URL + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}
