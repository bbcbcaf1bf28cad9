package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest/streamtest"
	"github.com/aep-gateway/aep-gateway/internal/clitest"
)

// inProcessPeer is the test gateway as a fan-out peer; its "server process"
// is the test binary itself, so CPU and RSS figures include the clients.
// The stack is the one streamtest mounts, as cmd/aep-gateway does.
func inProcessPeer(t *testing.T) (*gatewayPeer, *clitest.Gateway) {
	st := streamtest.New(t, gatewaytest.Options{Partitions: 3, Config: func(c *gateway.Config) { c.WriteTimeout = 10 * time.Second }}, nil)
	g := clitest.Of(t, st.Cluster, st.Client, st.URL)
	return newGatewayPeer(&server{name: "gateway", url: g.URL, pid: os.Getpid()}, ""), g
}

func quiet(string, ...any) {}

func TestFanoutDeliversEveryEventToEverySubscriber(t *testing.T) {
	for _, tr := range []string{transportSSE, transportWS} {
		t.Run(tr, func(t *testing.T) {
			p, _ := inProcessPeer(t)
			const subs = 4
			r, err := runFanout(t.Context(), "gateway", p, FanoutConfig{Transport: tr, Subscribers: subs,
				Duration: time.Second, Warmup: time.Second, Batch: 10, Window: 50, Publishers: 2, Dial: 2, Progress: quiet})
			if err != nil {
				t.Fatal(err)
			}
			if r.Published == 0 || r.Published%10 != 0 {
				t.Fatalf("published %d events, want a positive multiple of the batch", r.Published)
			}
			if r.Missing != 0 || r.Ended != 0 {
				t.Fatalf("missing %d deliveries, %d subscribers ended: %+v", r.Missing, r.Ended, r)
			}
			// Under -race on a loaded machine the window may see none of them
			// (they arrive in the drain); it never sees more than were sent.
			if r.Deliveries < 0 || r.Deliveries > r.Published*subs || r.CPU <= 0 || r.Window < time.Second {
				t.Fatalf("window figures %+v", r)
			}
		})
	}
}

// Single-event publishes (the case users run) with the broker's CPU: the
// kfake broker runs in the test binary, so --broker-pid is this process.
func TestFanoutSingleEventPublishesWithBrokerCPU(t *testing.T) {
	p, _ := inProcessPeer(t)
	const subs = 3
	r, err := runFanout(t.Context(), "gateway", p, FanoutConfig{Transport: transportSSE, Subscribers: subs,
		Duration: time.Second, Warmup: 500 * time.Millisecond, Batch: 1, Window: 50, Publishers: 8, Dial: 2,
		BrokerPID: os.Getpid(), Broker: "kafka", Progress: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if r.Published == 0 || r.Missing != 0 || r.Batch != 1 || r.Publishers != 8 || r.Broker != "kafka" {
		t.Fatalf("%+v", r)
	}
	if r.BrokerCPU <= 0 || (r.Deliveries > 0 && r.SystemPerCPUSec() >= r.PerCPUSec()) {
		t.Fatalf("broker CPU %v, system %.0f vs gateway %.0f deliveries per CPU-second", r.BrokerCPU, r.SystemPerCPUSec(), r.PerCPUSec())
	}
}

func TestFanoutDialectD(t *testing.T) {
	for _, tr := range []string{transportSSE, transportWS} {
		t.Run(tr, func(t *testing.T) {
			p, _ := inProcessPeer(t)
			p.dialect = aep.DialectD
			const subs = 3
			r, err := runFanout(t.Context(), "gateway", p, FanoutConfig{Transport: tr, Dialect: aep.DialectD, Subscribers: subs,
				Duration: time.Second, Warmup: time.Second, Batch: 10, Window: 50, Publishers: 2, Dial: 2, Progress: quiet})
			if err != nil {
				t.Fatal(err)
			}
			if r.Published == 0 || r.Missing != 0 || r.Ended != 0 || r.Dialect != "D" || r.Deliveries > r.Published*subs {
				t.Fatalf("%+v", r)
			}
		})
	}
}

func TestFanoutRatiosPairPeers(t *testing.T) {
	rep := FanoutReport{Runs: []FanoutResult{
		{Peer: "gateway", Transport: "sse", Subscribers: 100, Deliveries: 300, CPU: time.Second},
		{Peer: "centrifugo", Transport: "sse", Subscribers: 100, Deliveries: 200, CPU: time.Second},
		{Peer: "gateway", Transport: "ws", Subscribers: 100, Deliveries: 300, CPU: time.Second},
	}}
	rep.Runs[0].BrokerCPU = time.Second // the gateway's broker: whole system 300 per 2 CPU-seconds
	rep.ratios()
	if len(rep.Ratios) != 1 || rep.Ratios["sse/100"] != 1.5 {
		t.Fatalf("ratios %v, want only sse/100 = 1.5", rep.Ratios)
	}
	if len(rep.SystemRatios) != 1 || rep.SystemRatios["sse/100"] != 0.75 {
		t.Fatalf("whole-system ratios %v, want only sse/100 = 0.75", rep.SystemRatios)
	}
	var b strings.Builder
	printFanout(&b, rep)
	if !strings.Contains(b.String(), "sse ×100: 1.50") {
		t.Fatalf("report:\n%s", b.String())
	}
}

func TestLatencyGatewayAndDirect(t *testing.T) {
	p, g := inProcessPeer(t)
	cfg := LatencyConfig{Rate: 200, Duration: 500 * time.Millisecond, Concurrency: 4, Progress: quiet}
	gr, err := gatewayLatency(t.Context(), p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	dr, err := directLatency(t.Context(), g.Cluster.ListenAddrs(), "latency.direct", cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []LatencyResult{gr, dr} {
		l := r.Latency
		if r.Sent != 100 || r.Lost != 0 || l.Count != 100 || l.P50 <= 0 || l.P50 > l.P99 || l.P99 > l.Max {
			t.Fatalf("%s: %+v", r.Path, r)
		}
	}
	if got := g.Records("latency.direct"); got != 100+1 && got < 100 { // the warm-up adds a few
		t.Fatalf("direct topic holds %d records", got)
	}
	two := gr.merge(gr)
	if two.Sent != 200 || two.Rounds != 2 || two.Latency.Count != 200 || two.Latency.Max != gr.Latency.Max {
		t.Fatalf("merged %+v", two)
	}
	rep := LatencyReport{Runs: []LatencyResult{gr, dr}}
	if d, ok := rep.AddedP99(200); !ok || d != gr.Latency.P99-dr.Latency.P99 {
		t.Fatalf("added p99 %v %v", d, ok)
	}
}

func TestIdleHoldsConnectionsAndSamplesTheStorm(t *testing.T) {
	p, _ := inProcessPeer(t)
	r, err := runIdle(t.Context(), "gateway", p, IdleConfig{Transport: transportSSE, Connections: 50,
		Settle: 100 * time.Millisecond, Storm: 200 * time.Millisecond, Dial: 8, Progress: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if r.RSSBefore <= 0 || r.RSSOpen <= 0 || r.StormPeak < r.RSSOpen || r.StormAfter <= 0 || r.Connections != 50 {
		t.Fatalf("%+v", r)
	}
}

func TestProcCPUAndRSS(t *testing.T) {
	pid := os.Getpid()
	c0, err := procCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		x++
	}
	c1, err := procCPU(pid)
	if err != nil || c1 <= c0 {
		t.Fatalf("cpu %v → %v after busy work (%d), err %v", c0, c1, x, err)
	}
	if rss, err := procRSS(pid); err != nil || rss < 1<<20 {
		t.Fatalf("rss %d, %v", rss, err)
	}
	if _, err := procCPU(1 << 30); err == nil {
		t.Fatal("no error for a missing pid")
	}
}

// TestFanoutCentrifugo runs the peer end to end when a Centrifugo binary
// is installed (go install github.com/centrifugal/centrifugo/v6@v6.9.1).
func TestFanoutCentrifugo(t *testing.T) {
	bin, err := (&serverFlags{}).centrifugoBinary()
	if err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := startCentrifugo(ctx, bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.srv.stop()
	for _, tr := range []string{transportSSE, transportWS} {
		r, err := runFanout(ctx, "centrifugo", c, FanoutConfig{Transport: tr, Subscribers: 3,
			Duration: 500 * time.Millisecond, Warmup: 200 * time.Millisecond, Batch: 10, Window: 50, Publishers: 1, Dial: 3, Progress: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if r.Published == 0 || r.Missing != 0 || r.Ended != 0 || r.Deliveries <= 0 || r.CPU <= 0 {
			t.Fatalf("%s: %+v", tr, r)
		}
	}
}

func TestBenchSubcommandsRefuseBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"fanout"}, // no server
		{"fanout", "--gateway-bin", "x", "--url", "http://127.0.0.1:1"},
		{"fanout", "--url", "http://127.0.0.1:1", "--subscribers", "0"},
		{"fanout", "--gateway-bin", "x", "--kafka-brokers", "", "--broker-pid", "1"}, // embedded: no broker process
		{"fanout", "--url", "http://127.0.0.1:1", "--broker-pid", "-1"},
		{"fanout", "--url", "http://127.0.0.1:1", "--transports", "sse,tcp"},
		{"fanout", "--url", "http://127.0.0.1:1", "--centrifugo-url", "http://127.0.0.1:2"}, // no key
		{"latency", "--url", "http://127.0.0.1:1", "--kafka-brokers", ""},
		{"latency", "--url", "http://127.0.0.1:1", "--kafka-brokers", "k:9092", "--rates", "0"},
		{"idle", "--url", "http://127.0.0.1:1", "--connections", "0"},
		{"cleanup", "--kafka-brokers", "k:9092", "--prefix", "aep.default."},
		{"nosuch"},
	} {
		var out, errb strings.Builder
		if code := run(t.Context(), args, strings.NewReader(""), &out, &errb); code != exitUsage {
			t.Errorf("%q: exit %d, want %d (usage); stderr %s", args, code, exitUsage, errb.String())
		}
	}
	var out strings.Builder
	if code := run(t.Context(), []string{"--help"}, strings.NewReader(""), &out, &out); code != 0 ||
		!strings.Contains(out.String(), "aepbench fanout") || !strings.Contains(out.String(), "aepbench idle") {
		t.Fatalf("bench --help: %d\n%s", code, out.String())
	}
}
