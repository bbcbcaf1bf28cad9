package integration

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// catchUpStreamBound is the memory one catching-up stream may hold, as
// docs/security.md states it: its reader's one fetch in flight
// (engine.DefaultReaderFetchBytes, 256 KiB compressed) as records, decoded, plus its
// queue of events (engine.DefaultQueue, 256) and its client's buffers.
const catchUpStreamBound = 3 << 20

// attackerKey is the API key of the tenant whose streams never read.
const attackerKey = "k-attacker"

// The memory a tenant's catching-up WebSocket subscriptions may take on a
// node, as docs/security.md states it: twice (the Go heap's headroom at
// GOGC 100) the events queued under --tenant-memory-budget and each
// connection's outbound bytes, plus one decoded fetch per subscription
// (fetchsize: about ReaderFetchBytes decoded, at least one producer batch
// of at most 1 MB) and 32 MiB.
func wsCatchUpBound(conns, subs int) int64 {
	return 2*(engine.DefaultTenantMemoryBudget+int64(conns)*transport.DefaultOutboundBytes) + int64(subs)<<20 + 32<<20
}

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
// compressible: the same over events that compress about 100x (issue 31:
// 20 such streams took +618-654 MB, 32 MB each, since a fetch is bounded
// in compressed bytes; here 14.7 MiB per stream before internal/fetchsize,
// 2.8 after).
func TestCatchUpMemoryIsBoundedPerStream(t *testing.T) {
	streams := envInt(t, "AEP_CATCHUP_STREAMS", 20)
	mib := envInt(t, "AEP_CATCHUP_MIB", 20)
	t.Run("random", func(t *testing.T) { catchUpMemory(t, streams, mib, false) })
	t.Run("compressible", func(t *testing.T) { catchUpMemory(t, streams, mib*3, true) })
}

// startMemGateway starts a gateway on the embedded broker without
// connection caps and returns it with a cursor at the start of the
// tenant's log (the first event's, read on a live stream).
func startMemGateway(ctx context.Context, t *testing.T, extra ...string) (*gatewayProc, string) {
	t.Helper()
	return startMemGatewayOn(ctx, t, []string{"--data-dir", t.TempDir() + "/data", "--embedded-kafka-listen", "127.0.0.1:0"}, extra...)
}

// memBroker is the broker AEP_CATCHUP_BROKER chooses for the WebSocket
// amplification test: the embedded one (default), or "kafka", the
// integration tests' Apache Kafka. It returns the gateway's broker flags,
// a seed address and the tenant "default"'s topic.
func memBroker(t *testing.T) (args []string, addr, topic string) {
	switch b := os.Getenv("AEP_CATCHUP_BROKER"); b {
	case "", "embedded":
		return []string{"--data-dir", t.TempDir() + "/data", "--embedded-kafka-listen", "127.0.0.1:0"}, "", partitioning.Naming{}.Events("default")
	case "kafka":
		k := StartBroker(t)
		prefix := strings.ReplaceAll(TopicName(t), "_", "-")
		return []string{"--kafka-brokers", strings.Join(k.Seeds, ","), "--topic-template", prefix + ".{tenant}.events",
			"--topic-replication-factor", "1"}, k.Seeds[0], prefix + ".default.events"
	default:
		t.Fatalf("AEP_CATCHUP_BROKER=%q: embedded or kafka", b)
		return nil, "", ""
	}
}

// startMemGatewayOn is startMemGateway on the broker the flags in broker
// name.
func startMemGatewayOn(ctx context.Context, t *testing.T, broker []string, extra ...string) (*gatewayProc, string) {
	t.Helper()
	// The audit sealer and the task-state worker are off: their reading
	// of the burst is bounded in decoded bytes (1 MiB a fetch) but leaves
	// garbage beside the streams that these tests attribute to them; with
	// both on, CI measured +135/+196 MiB against 124, and +196 against 196
	// (docs/audit.md, "Costs").
	// AEP_CATCHUP_GATEWAY_ARGS adds flags (space-separated), e.g. to measure
	// with catch-up pacing off: "--tenant-catchup-rate -1 --catchup-rate -1".
	g := startGateway(t, append(append(append(broker, "--topic-partitions", "4", "--max-connections-per-ip", "0", "--max-streams-per-tenant", "0",
		"--task-states=false", "--audit-seal", "off"),
		strings.Fields(os.Getenv("AEP_CATCHUP_GATEWAY_ARGS"))...), extra...)...)
	hdr := http.Header{}
	if len(extra) > 0 {
		hdr.Set("Authorization", "Bearer "+attackerKey)
	}
	live := gatewaytest.MustOpenSSE(t, g.URL+"/aep/events?types=*", gatewaytest.SSEOptions{Buffer: 16, Header: hdr})
	first := `{"aep_version":"0.1","id":"evt_first","type":"task.progress","source":"agent:mem","session_id":"s0","created_at":"2026-07-09T10:00:00Z","payload":{}}`
	var auth map[string]string
	if a := hdr.Get("Authorization"); a != "" {
		auth = map[string]string{"Authorization": a}
	}
	if r, err := g.post(ctx, "/aep/events", "application/x-ndjson", auth, first); err != nil || r.status != http.StatusAccepted {
		t.Fatalf("publish: %v %+v", err, r)
	}
	msgs := live.Until("the first event", func(m gatewaytest.SSEMessage) bool { return m.Event == "task.progress" })
	live.Close()
	return g, msgs[len(msgs)-1].ID
}

// peakGrowth samples the process's RSS for d and returns the baseline
// (taken first) and the peak.
func peakGrowth(pid int, base int64, d time.Duration) int64 {
	peak := base
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		peak = max(peak, procStatus(pid, "VmRSS")<<10)
		time.Sleep(100 * time.Millisecond)
	}
	return peak
}

func catchUpMemory(t *testing.T, streams, mib int, compressible bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g, from := startMemGateway(ctx, t)
	pid := g.cmd.Process.Pid

	// The topic: mib MiB of 1 KiB events, written straight to the broker.
	fillTenantWith(ctx, t, g.KafkaAddr, mib<<10, 430, compressible, kgo.ProducerLinger(5*time.Millisecond))

	time.Sleep(time.Second) // let the broker's and the gateway's allocations settle
	base := procStatus(pid, "VmRSS") << 10

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
	peak := peakGrowth(pid, base, 8*time.Second) // within the streams' 10 s write timeout
	grown := peak - base
	bound := int64(streams)*catchUpStreamBound + 64<<20
	t.Logf("%d never-reading streams over %d MiB (compressible %v): RSS %d MiB idle, peak %d MiB (+%d MiB, %.2f MiB per stream; bound %d MiB)",
		streams, mib, compressible, base>>20, peak>>20, grown>>20, float64(grown)/float64(streams)/(1<<20), bound>>20)
	if grown > bound {
		t.Errorf("catching-up streams grew RSS by %d MiB, over the bound of %d MiB", grown>>20, bound>>20)
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

// One WebSocket D connection with 32 replayable subscriptions from the
// start of 30 MiB of 100 KB events, never reading (issue 31: 658-673 MB of
// live heap, RSS 55 -> 877 MB; five connections 2.6 GB). Before the
// budget, here: +288 MiB with one connection, +1402 MiB with five; with it
// +109 and +164 MiB (docs/security.md has the run): the tenant's budget
// holds the queued events whatever the connections ask, each connection's
// outbound queue is bounded in bytes, and what is left grows with the
// subscriptions (one decoded fetch each).
// AEP_CATCHUP_WS_CONNS sets the connections (default 1; the 5),
// AEP_CATCHUP_WS_SUBS the subscriptions on each (default 32), and
// AEP_CATCHUP_BROKER=kafka runs it on Apache Kafka (KAFKA_BROKERS or the
// harness's) instead of the embedded broker.
func TestCatchUpMemoryManySubscriptionsOneConnection(t *testing.T) {
	conns := envInt(t, "AEP_CATCHUP_WS_CONNS", 1)
	subs := envInt(t, "AEP_CATCHUP_WS_SUBS", 32)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte(keyFileLine("default", attackerKey)+keyFileLine("victim", "k-victim")), 0o600); err != nil {
		t.Fatal(err)
	}
	broker, addr, topic := memBroker(t)
	// The audit sealer is off here: sealing these 30 MiB of 100 KB events
	// beside the streams' 64 MiB budget went over this bound in one run of
	// three after its fetches were bounded in bytes decoded (+216 MiB
	// against 196; +115 and +120 in the others; docs/audit.md, "Costs").
	g, from := startMemGatewayOn(ctx, t, broker, "--api-keys", keys)
	if addr == "" {
		addr = g.KafkaAddr
	}
	pid := g.cmd.Process.Pid
	batch := int32(4 << 20) // larger than the gateway writes: fetches of one batch are larger
	if addr != g.KafkaAddr {
		batch = 1_000_000 // Apache Kafka's default message.max.bytes refuses more
	}
	fillTopic(ctx, t, addr, topic, 300, 50_000, false, kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchMaxBytes(batch))
	time.Sleep(time.Second)
	// Another tenant ingests one event at a time: its latencies unloaded,
	// then during the attack.
	victim := &http.Client{Transport: &http.Transport{}}
	ingest := func(n int) []time.Duration {
		out := make([]time.Duration, 0, n)
		for i := range n {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+"/aep/events", strings.NewReader(dEvent(i, "victim")))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer k-victim")
			start := time.Now()
			resp, err := victim.Do(req)
			if err != nil {
				t.Error(err)
				return out
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Errorf("victim ingest: %d", resp.StatusCode)
				return out
			}
			out = append(out, time.Since(start))
		}
		slices.Sort(out)
		return out
	}
	ingest(50) // warm: connections, the tenant's topic
	unloaded := ingest(200)
	base := procStatus(pid, "VmRSS") << 10
	for c := range conns {
		w := gatewaytest.DialWSD(t, gatewaytest.WSURL(g.URL, "/aep"), gatewaytest.WSOptions{ReadLimit: 1 << 30,
			Header: http.Header{"Authorization": {"Bearer " + attackerKey}}})
		for i := range subs { // the answers are not read: nor is anything after them
			w.Send(gatewaytest.DControl(fmt.Sprintf("evt_sub_%d_%d", c, i), "subscription.requested",
				`{"types":["task.*"],"delivery_mode":"replayable","from_cursor":"`+from+`"}`))
		}
	}
	loadedCh := make(chan []time.Duration, 1)
	go func() { loadedCh <- ingest(400) }() // from the attack's first seconds on
	peak := peakGrowth(pid, base, 10*time.Second)
	loaded := <-loadedCh
	grown := peak - base
	t.Logf("%s broker: %d WebSocket connection(s) x %d replayable subscriptions over 30 MiB of 100 KB events, never reading: RSS %d MiB idle, peak %d MiB (+%d MiB); another tenant's single-event ingest p50 %v -> %v, p99 %v -> %v (%.2fx)",
		cmp.Or(os.Getenv("AEP_CATCHUP_BROKER"), "embedded"), conns, subs, base>>20, peak>>20, grown>>20, pct(unloaded, 0.5), pct(loaded, 0.5), pct(unloaded, 0.99), pct(loaded, 0.99),
		float64(pct(loaded, 0.99))/float64(pct(unloaded, 0.99)))
	// The latencies are reported, not asserted: a timing bound in a test
	// fails on a loaded machine (docs/security.md has the figures).
	if bound := wsCatchUpBound(conns, conns*subs); grown > bound {
		t.Errorf("grew RSS by %d MiB, over the stated bound of %d MiB", grown>>20, bound>>20)
	}
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
