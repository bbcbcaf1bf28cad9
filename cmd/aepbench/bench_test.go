package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest/streamtest"
	"github.com/aep-gateway/aep-gateway/internal/clitest"
	"github.com/aep-gateway/aep-gateway/internal/eventgen"
)

func TestBenchFixedRateWithBaseline(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about 2s")
	}
	for _, d := range []aep.Dialect{aep.DialectR, aep.DialectD} {
		t.Run(d.String(), func(t *testing.T) {
			g := clitest.NewGateway(t)
			const rate, batch = 200, 10
			rep, err := RunBench(context.Background(), BenchConfig{
				Dialect: d, URL: g.URL, Rate: rate, Duration: time.Second, Concurrency: 2, Batch: batch, Sessions: 5,
				BaselineBrokers: g.Cluster.ListenAddrs(), BaselinePartitions: 3,
				GatewayPID: os.Getpid(), // in process: the gateway's CPU is aepctl's
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []PhaseReport{rep.Gateway, *rep.Baseline} {
				// The schedule holds rate×1s events; a starved machine may cut
				// it short at the hard bound, never exceed it.
				if p.Events <= 0 || p.Events > rate || p.Events%batch != 0 {
					t.Fatalf("%s: sent %d events, want a multiple of %d in (0, %d]", p.Name, p.Events, batch, rate)
				}
				if p.Accepted != p.Events || p.Rejected != 0 || p.Failed != 0 || p.Requests != p.Events/batch {
					t.Fatalf("%s: %+v", p.Name, p)
				}
				if l := p.Latency; l.Count != uint64(p.Requests) || l.Max <= 0 || l.P50 > l.P90 || l.P90 > l.P99 || l.P99 > l.Max {
					t.Fatalf("%s: latency %+v", p.Name, l)
				}
				// From schedule includes the request, so it is never shorter.
				if f := p.FromSchedule; f.Count != uint64(p.Requests) || f.Max < p.Latency.Max-time.Millisecond || f.P50 > f.P99 {
					t.Fatalf("%s: from schedule %+v, latency %+v", p.Name, f, p.Latency)
				}
				if p.AcceptedPerSec() <= 0 {
					t.Fatalf("%s: no rate", p.Name)
				}
			}
			if n := rep.Gateway.ByStatus["202"]; n != rep.Gateway.Requests || len(rep.Gateway.ByStatus) != 1 {
				t.Fatalf("gateway statuses %v", rep.Gateway.ByStatus)
			}
			if n := rep.Baseline.ByStatus["ok"]; n != rep.Baseline.Requests || len(rep.Baseline.ByStatus) != 1 {
				t.Fatalf("baseline statuses %v", rep.Baseline.ByStatus)
			}
			if got := g.Records(clitest.DevTopic); got != int64(rep.Gateway.Accepted) {
				t.Fatalf("gateway topic holds %d, accepted %d", got, rep.Gateway.Accepted)
			}
			if got := g.Records("aepctl.bench.baseline"); got != int64(rep.Baseline.Accepted) {
				t.Fatalf("baseline topic holds %d, accepted %d", got, rep.Baseline.Accepted)
			}
			if rep.Ratio() <= 0 {
				t.Fatal("no ratio")
			}
			for _, p := range []PhaseReport{rep.Gateway, *rep.Baseline} {
				if c := p.CPU; c.Client < 0 || c.Gateway < 0 || c.Broker != 0 || c.Client+c.Gateway == 0 && p.Elapsed > 5*time.Second {
					t.Fatalf("%s: CPU %+v over %v", p.Name, c, p.Elapsed)
				}
			}
			// Both phases sent the same bytes.
			if rep.Gateway.Events == rep.Baseline.Events {
				gv, bv := g.ReadValues(clitest.DevTopic, rep.Gateway.Events), g.ReadValues("aepctl.bench.baseline", rep.Baseline.Events)
				if !sameSet(gv, bv) {
					t.Fatal("the gateway and the baseline topics hold different events")
				}
			}
		})
	}
}

func sameSet(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, v := range a {
		m[string(v)]++
	}
	for _, v := range b {
		m[string(v)]--
	}
	for _, n := range m {
		if n != 0 {
			return false
		}
	}
	return true
}

func TestBenchMaxStopsAtEventBound(t *testing.T) {
	g := clitest.NewGateway(t)
	rep, err := RunBench(context.Background(), BenchConfig{URL: g.URL, Duration: time.Minute, MaxEvents: 250, Batch: 100, Concurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	// 100 + 100 + 50: the last batch is cut to the bound.
	if p := rep.Gateway; p.Events != 250 || p.Accepted != 250 || p.Requests != 3 || p.FromSchedule.Count != 0 {
		t.Fatalf("%+v", p)
	}
}

func TestBenchCountsRejectedAndFailed(t *testing.T) {
	g := clitest.NewGateway(t)
	t.Run("rejected", func(t *testing.T) {
		// 600 KB events are over the gateway's 512 KiB per-event limit: 413.
		rep, err := RunBench(context.Background(), BenchConfig{URL: g.URL, Duration: time.Minute, MaxEvents: 2, Batch: 1, Size: 600_000})
		if err != nil {
			t.Fatal(err)
		}
		if p := rep.Gateway; p.Rejected != 2 || p.Accepted != 0 || p.Failed != 0 || p.ByStatus["413"] != 2 {
			t.Fatalf("%+v", p)
		}
	})
	t.Run("failed", func(t *testing.T) {
		_, u := clitest.NewFlakyProxy(t, g.URL, 1000) // always 503
		rep, err := RunBench(context.Background(), BenchConfig{URL: u, Duration: time.Minute, MaxEvents: 30, Batch: 10, Concurrency: 1})
		if err != nil {
			t.Fatal(err)
		}
		if p := rep.Gateway; p.Failed != 30 || p.Accepted != 0 || p.Rejected != 0 || p.ByStatus["503"] != 3 {
			t.Fatalf("%+v", p)
		}
	})
}

func TestBenchRefusesRemoteTargets(t *testing.T) {
	tests := []BenchConfig{
		{URL: "http://192.0.2.1:8080"},
		{URL: "http://127.0.0.1:8080", BaselineBrokers: []string{"192.0.2.1:9092"}},
	}
	for _, c := range tests {
		if _, err := RunBench(context.Background(), c); !errors.Is(err, errRemote) {
			t.Errorf("%v %v: err %v, want errRemote", c.URL, c.BaselineBrokers, err)
		}
	}
	if _, err := RunBench(context.Background(), BenchConfig{URL: "ftp://127.0.0.1"}); err == nil {
		t.Error("ftp URL accepted")
	}
}

func TestBenchCancelStopsEverything(t *testing.T) {
	g := clitest.NewGateway(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err := RunBench(ctx, BenchConfig{URL: g.URL, Duration: time.Minute, Rate: 10})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Gateway.Events != 0 || rep.Gateway.Requests != 0 {
		t.Fatalf("%+v", rep.Gateway)
	}
}

// A gateway that never answers: requests end at RequestTimeout, the
// dispatcher at the duration, and RunBench returns with every request
// counted as failed.
func TestBenchStopsAgainstAHungServer(t *testing.T) {
	stop := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer hs.Close()
	defer close(stop)
	rep, err := RunBench(context.Background(), BenchConfig{URL: hs.URL, Duration: 300 * time.Millisecond,
		RequestTimeout: 100 * time.Millisecond, Concurrency: 2, Batch: 5})
	if err != nil {
		t.Fatal(err)
	}
	p := rep.Gateway
	if p.Requests == 0 || p.Accepted != 0 || p.Failed != p.Requests*5 || p.ByStatus["error"] != p.Requests || p.Events != p.Failed {
		t.Fatalf("%+v", p)
	}
}

// CPU time per event: each phase's processes over its accepted events, and
// the baseline's total over the gateway phase's, only when the gateway's
// process was measured.
func TestBenchCPUPerEvent(t *testing.T) {
	g := PhaseReport{Accepted: 1000, CPU: PhaseCPU{Client: 3 * time.Millisecond, Gateway: 5 * time.Millisecond, Broker: 2 * time.Millisecond}}
	k := PhaseReport{Accepted: 2000, CPU: PhaseCPU{Client: 4 * time.Millisecond, Broker: 4 * time.Millisecond}}
	if got := g.PerEvent(g.CPU.Total()); got != 10 {
		t.Errorf("gateway phase total %.2f µs/event, want 10", got)
	}
	if got := g.PerEvent(g.CPU.Gateway); got != 5 {
		t.Errorf("gateway %.2f µs/event, want 5", got)
	}
	rep := BenchReport{Config: BenchConfig{GatewayPID: 1}, Gateway: g, Baseline: &k}
	if got := rep.CPURatio(); got != 0.4 {
		t.Errorf("CPU ratio %.3f, want 0.4 (4 µs over 10 µs)", got)
	}
	rep.Config.GatewayPID = 0
	if got := rep.CPURatio(); got != 0 {
		t.Errorf("CPU ratio without the gateway's process %.3f, want 0", got)
	}
	if got := (PhaseReport{}).PerEvent(time.Second); got != 0 {
		t.Errorf("no events: %.2f, want 0", got)
	}
	a := PhaseCPU{Client: 5, Gateway: 7, Broker: 9}
	if d := a.sub(PhaseCPU{Client: 1, Gateway: 2, Broker: 3}); d != (PhaseCPU{Client: 4, Gateway: 5, Broker: 6}) {
		t.Errorf("sub %+v", d)
	}
}

// The bench's own connections serve plain-HTTP gateways, under any base
// path; https goes through net/http.
func TestConnSenderRequestHead(t *testing.T) {
	if _, ok := newConnSender("https://127.0.0.1:8443", "", aep.DialectR, 1); ok {
		t.Error("https taken by the plain-HTTP sender")
	}
	s, ok := newConnSender("http://127.0.0.1:8080/gw/", "k1", aep.DialectR, 1)
	if !ok {
		t.Fatal("http refused")
	}
	for _, want := range []string{"POST /gw/events HTTP/1.1\r\n", "Host: 127.0.0.1:8080\r\n", "Authorization: Bearer k1\r\n", "AEP-Version: ", "Content-Type: application/x-ndjson\r\n"} {
		if !strings.Contains(string(s.head), want) {
			t.Errorf("head lacks %q:\n%s", want, s.head)
		}
	}
	if !strings.HasSuffix(string(s.head), "Content-Length: ") || s.addr != "127.0.0.1:8080" {
		t.Errorf("head %q, addr %q", s.head, s.addr)
	}
	d, _ := newConnSender("http://localhost", "", aep.DialectD, 1)
	if !strings.HasPrefix(string(d.head), "POST /aep/events ") || strings.Contains(string(d.head), "AEP-Version") || d.addr != "localhost:80" {
		t.Errorf("D head %q, addr %q", d.head, d.addr)
	}
}

// --transport ws: every event is one message on a held connection, each
// answered (D: event.acknowledged; R: the pong after the batch), and the
// topic holds exactly what was reported accepted. A gateway that refuses
// the upgrade counts every event failed.
func TestBenchOverWebSocket(t *testing.T) {
	for _, d := range []aep.Dialect{aep.DialectR, aep.DialectD} {
		t.Run(d.String(), func(t *testing.T) {
			st := streamtest.New(t, gatewaytest.Options{Partitions: 3}, nil)
			g := clitest.Of(t, st.Cluster, st.Client, st.URL)
			rep, err := RunBench(context.Background(), BenchConfig{Dialect: d, URL: g.URL, WebSocket: true,
				Duration: time.Minute, MaxEvents: 60, Batch: 5, Concurrency: 3, Sessions: 4})
			if err != nil {
				t.Fatal(err)
			}
			if p := rep.Gateway; p.Events != 60 || p.Accepted != 60 || p.Rejected != 0 || p.Failed != 0 || p.Requests != 12 || p.ByStatus["ws"] != 12 {
				t.Fatalf("%+v", p)
			}
			if got := g.Records(clitest.DevTopic); got != 60 {
				t.Fatalf("topic holds %d records, 60 reported accepted", got)
			}
		})
	}
	t.Run("refused", func(t *testing.T) {
		st := streamtest.New(t, gatewaytest.Options{Partitions: 3}, nil)
		_, u := clitest.NewFlakyProxy(t, st.URL, 1000) // always 503: no upgrade
		rep, err := RunBench(context.Background(), BenchConfig{Dialect: aep.DialectD, URL: u, WebSocket: true,
			Duration: time.Minute, MaxEvents: 10, Batch: 5, Concurrency: 1})
		if err != nil {
			t.Fatal(err)
		}
		if p := rep.Gateway; p.Failed != 10 || p.Accepted != 0 || p.ByStatus["error"] != 2 {
			t.Fatalf("%+v", p)
		}
	})
}

// BenchmarkMakeBatch is aepctl's own work per event in a bench ingest phase
// (batches of 100 R events): generating them, and in the routed phase also
// building their attributes and routing headers. docs/benchmarks.md
// subtracts it from the routed phase's aepctl CPU time to get the
// producer's alone.
func BenchmarkMakeBatch(b *testing.B) {
	for _, routed := range []bool{false, true} {
		name := "bare"
		if routed {
			name = "routed"
		}
		b.Run(name, func(b *testing.B) {
			g := eventgen.NewGenerator(eventgen.GenOptions{Dialect: aep.DialectR, Sessions: 100})
			b.ReportAllocs()
			for b.Loop() {
				makeBatch(g, 100, routed)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/event")
		})
	}
}
