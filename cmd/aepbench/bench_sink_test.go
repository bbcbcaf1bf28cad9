package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/internal/clitest"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestCountLines(t *testing.T) {
	for in, want := range map[string]int{
		"": 0, "\n\n": 0, "a": 1, "a\n": 1, "a\nb": 2, "a\nb\n": 2, "a\r\n \n\tb\n": 2, " \r\n": 0,
		strings.Repeat("{}\n", 40000): 40000, // past one read buffer
	} {
		if got, err := countLines(strings.NewReader(in)); err != nil || got != want {
			t.Errorf("countLines(%.20q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

// Every phase of one run accepts every event: the gateway, the bare and
// the routed Kafka baselines, and the http floor, whose server is aepctl
// bench http-sink in a process of its own (here the test binary, through
// TestMain). The routed phase's records are the gateway's: same key, same
// headers, same value; the bare phase's carry no headers.
func TestBenchRoutedAndHTTPFloor(t *testing.T) {
	g := clitest.NewGateway(t)
	const n, batch = 60, 10
	rep, err := RunBench(context.Background(), BenchConfig{URL: g.URL, Duration: time.Minute, MaxEvents: n, Batch: batch,
		Concurrency: 2, Sessions: 4, BaselineBrokers: g.Cluster.ListenAddrs(), BaselinePartitions: 3,
		BaselineRouted: true, BaselineHTTP: true, GatewayPID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*PhaseReport{&rep.Gateway, rep.Baseline, rep.Routed, rep.HTTPFloor} {
		if p == nil {
			t.Fatalf("a phase is missing: %+v", rep)
		}
		if p.Events != n || p.Accepted != n || p.Rejected != 0 || p.Failed != 0 || p.Requests != n/batch {
			t.Fatalf("%s: %+v", p.Name, p)
		}
	}
	f := rep.HTTPFloor
	if f.Name != "http-floor" || f.Server != "sink" || f.ByStatus["202"] != n/batch || rep.HTTPFloorRatio() <= 0 {
		t.Fatalf("http floor %+v, ratio %v", f, rep.HTTPFloorRatio())
	}
	if rep.Gateway.Server != "" || rep.Routed.Server != "" {
		t.Fatal("a gateway or Kafka phase names another server")
	}

	render := func(r *kgo.Record) string {
		hs := make([]string, 0, len(r.Headers))
		for _, h := range r.Headers {
			hs = append(hs, h.Key+"="+string(h.Value))
		}
		return fmt.Sprintf("key=%s headers=%s", r.Key, strings.Join(hs, ","))
	}
	want := map[string]string{} // value -> the gateway's key and headers
	for _, r := range g.ReadRecords(clitest.DevTopic, n) {
		if len(r.Headers) == 0 {
			t.Fatalf("a gateway record without headers: %s", r.Value)
		}
		want[string(r.Value)] = render(r)
	}
	var bare, routed []string
	for _, r := range g.ReadRecords("aepctl.bench.baseline", 2*n) {
		if len(r.Headers) == 0 {
			bare = append(bare, string(r.Value))
			continue
		}
		routed = append(routed, string(r.Value))
		if got, ok := want[string(r.Value)]; !ok || got != render(r) {
			t.Fatalf("routed record %s\n got  %s\n want %s", r.Value, render(r), got)
		}
	}
	if len(bare) != n || len(routed) != n || len(want) != n {
		t.Fatalf("baseline topic: %d bare and %d routed records, gateway %d; want %d each", len(bare), len(routed), len(want), n)
	}
	slices.Sort(bare)
	slices.Sort(routed)
	if !slices.Equal(bare, routed) {
		t.Fatal("the bare and routed phases sent different events")
	}
}
