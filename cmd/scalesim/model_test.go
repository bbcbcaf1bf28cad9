package main

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/aep-gateway/aep-gateway/filtering"
)

func TestSimulateIsDeterministic(t *testing.T) {
	in := DefaultInputs()
	a1, b1 := Simulate(in)
	a2, b2 := Simulate(in)
	if fmt.Sprint(a1, b1) != fmt.Sprint(a2, b2) {
		t.Fatal("two runs with one seed differ")
	}
	in.Seed++
	a3, _ := Simulate(in)
	if a3.KafkaEgressMBps == a1.KafkaEgressMBps {
		t.Fatal("another seed drew the same random placement")
	}
}

func TestTenantsConserveTheDeployment(t *testing.T) {
	for _, aff := range []bool{false, true} {
		in := DefaultInputs()
		in.Affinity = aff
		var eps float64
		conns := 0
		for _, x := range in.tenants() {
			eps += x.eps
			conns += x.conns
			if x.conns > 0 && (x.nodes < 1 || x.nodes > in.Nodes || x.nodes > x.conns) {
				t.Fatalf("affinity %v: tenant with %d connections on %d nodes", aff, x.conns, x.nodes)
			}
		}
		if conns != in.Connections || eps < in.IngestEPS*0.999 || eps > in.IngestEPS*1.001 {
			t.Fatalf("affinity %v: %d connections, %.0f events/s drawn", aff, conns, eps)
		}
	}
}

func TestDesignsCompare(t *testing.T) {
	in := DefaultInputs()
	today, workers := Simulate(in)
	if today.DeliveriesPerSec != workers.DeliveriesPerSec || today.DeliveriesPerSec <= 0 {
		t.Fatalf("deliveries %v vs %v: both designs deliver the same", today.DeliveriesPerSec, workers.DeliveriesPerSec)
	}
	// Random placement puts big tenants on every node: the workers read
	// each partition once and forward less than every node tailing it.
	if workers.KafkaEgressMBps >= today.KafkaEgressMBps || workers.NodeReadMBps >= today.NodeReadMBps {
		t.Fatalf("workers %+v not below today %+v", workers, today)
	}
	// One node: today's design reads each topic once, as a worker would.
	in.Nodes, in.Connections, in.Tenants = 1, 10_000, 100 // every tenant holds a connection
	today, _ = Simulate(in)
	if got, want := today.KafkaEgressMBps, in.IngestEPS*in.EventBytes/1e6; got < want*0.999 || got > want*1.001 {
		t.Fatalf("one node reads %.1f MB/s, want the ingest %.1f", got, want)
	}
}

func TestLimitsAreReported(t *testing.T) {
	in := DefaultInputs()
	in.IngestEPS = 5e6
	today, _ := Simulate(in)
	if !strings.Contains(limitsText(today.Limits), "broker egress") {
		t.Fatalf("at 5M events/s today's limits are %v", today.Limits)
	}
	if got := in.MaxNodesTailAll(); got != int(float64(in.Brokers)*in.BrokerEgressMBps/(in.IngestEPS*in.EventBytes/1e6)) || got <= 0 {
		t.Fatalf("max nodes %d", got)
	}
}

// BenchmarkSubscriptionMemory measures the heap one live subscription's
// filter costs in a node's index: the model's --sub-bytes. Filters are the
// common shape, one session of a dialect R tenant.
func BenchmarkSubscriptionMemory(b *testing.B) {
	const n = 100_000
	fs := make([]*filtering.Filter, n)
	for i := range fs {
		f, err := filtering.ParseR(fmt.Appendf(nil, `{"session":"s_%06d"}`, i))
		if err != nil {
			b.Fatal(err)
		}
		fs[i] = f
	}
	var per float64
	for b.Loop() {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		x := filtering.NewIndex()
		for i, f := range fs {
			x.Add(filtering.ID(i), f)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		per = float64(m1.HeapAlloc-m0.HeapAlloc) / n
		runtime.KeepAlive(x)
	}
	// The parsed filters are held by the caller in both readings; add them.
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	more := make([]*filtering.Filter, 1000)
	for i := range more {
		more[i], _ = filtering.ParseR(fmt.Appendf(nil, `{"session":"t_%06d"}`, i))
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	runtime.KeepAlive(more)
	b.ReportMetric(per, "index-B/sub")
	b.ReportMetric(float64(m1.HeapAlloc-m0.HeapAlloc)/1000, "filter-B/sub")
}
