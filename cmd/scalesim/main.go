// Command scalesim is the cost model of docs/scaling.md: it draws a
// deployment (Zipf-skewed tenants, connections spread over nodes; fixed
// seed, so the output is reproducible) and computes, for today's design
// (every node tails every tenant topic) and for filter workers that forward
// matches, the Kafka egress, each node's network, CPU, memory and fetched
// partitions, and which limits are passed. The per-unit costs default to
// figures measured by `make bench-report` and the Go benchmarks; every
// input is a flag.
//
// Usage:
//
//	go run ./cmd/scalesim [--nodes 100 --tenants 10000 --connections 1000000 ...]
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	in := DefaultInputs()
	fs := flag.NewFlagSet("scalesim", flag.ExitOnError)
	fs.IntVar(&in.Nodes, "nodes", in.Nodes, "gateway nodes")
	fs.IntVar(&in.Tenants, "tenants", in.Tenants, "tenants (one topic each)")
	fs.IntVar(&in.Connections, "connections", in.Connections, "live connections, all nodes")
	fs.Float64Var(&in.IngestEPS, "ingest", in.IngestEPS, "events/s into Kafka, all tenants")
	fs.Float64Var(&in.EventBytes, "event-bytes", in.EventBytes, "bytes per record on the wire")
	fs.IntVar(&in.Partitions, "partitions", in.Partitions, "partitions per tenant topic")
	fs.Float64Var(&in.ZipfS, "zipf", in.ZipfS, "skew of tenant sizes")
	fs.Float64Var(&in.MatchFraction, "match", in.MatchFraction, "share of its tenant's events one subscription matches")
	fs.Float64Var(&in.ConnRSS, "conn-rss", in.ConnRSS, "bytes of RSS per idle connection (bench idle)")
	fs.Float64Var(&in.SubBytes, "sub-bytes", in.SubBytes, "bytes per subscription in the filter index")
	fs.Float64Var(&in.DeliveriesPerCPU, "deliveries-per-cpu", in.DeliveriesPerCPU, "deliveries per CPU-second (bench fanout)")
	fs.Float64Var(&in.FilterNs, "filter-ns", in.FilterNs, "ns to route one event through an index")
	fs.Float64Var(&in.ConsumeNs, "consume-ns", in.ConsumeNs, "ns of CPU to fetch and decode one record")
	fs.Float64Var(&in.ForwardNs, "forward-ns", in.ForwardNs, "ns of CPU to produce one forwarded record")
	fs.IntVar(&in.Brokers, "brokers", in.Brokers, "Kafka brokers")
	fs.Float64Var(&in.BrokerEgressMBps, "broker-egress", in.BrokerEgressMBps, "MB/s out per broker")
	fs.Float64Var(&in.NodeNICMBps, "node-nic", in.NodeNICMBps, "MB/s in per gateway node")
	fs.Float64Var(&in.NodeCores, "node-cores", in.NodeCores, "cores per node")
	fs.Float64Var(&in.NodeMemGB, "node-mem", in.NodeMemGB, "GB of memory per node")
	fs.IntVar(&in.MaxPartitionsPerFetcher, "max-partitions", in.MaxPartitionsPerFetcher, "partitions one process (node or worker) may fetch")
	fs.IntVar(&in.MaxConnsPerBroker, "max-broker-conns", in.MaxConnsPerBroker, "client connections one broker serves")
	fs.Uint64Var(&in.Seed, "seed", in.Seed, "seed of the drawn deployment")
	fs.BoolVar(&in.Affinity, "affinity", false, "only the placement with a tenant-aware load balancer (default: both placements)")
	random := fs.Bool("random", false, "only the random placement")
	_ = fs.Parse(os.Args[1:])
	if !in.Affinity {
		Print(os.Stdout, in)
	}
	if !*random {
		fmt.Fprintln(os.Stdout)
		in.Affinity = true
		Print(os.Stdout, in)
	}
}

// DefaultInputs is the deployment of issue 13 (100 nodes, 10k tenants, 1M
// connections) with the costs measured on this machine (docs/scaling.md).
func DefaultInputs() Inputs {
	return Inputs{
		Nodes: 100, Tenants: 10_000, Connections: 1_000_000, IngestEPS: 200_000, EventBytes: 500,
		Partitions: 12, ZipfS: 1.1, MatchFraction: 0.01, Seed: 13,
		ConnRSS: 16 << 10, SubBytes: 500, DeliveriesPerCPU: 711_000, FilterNs: 383, ConsumeNs: 2_000, ForwardNs: 3_800,
		Brokers: 30, BrokerEgressMBps: 1_250, NodeNICMBps: 1_250, NodeCores: 8, NodeMemGB: 32, MaxPartitionsPerFetcher: 10_000, MaxConnsPerBroker: 20_000,
	}
}

// Print writes the model's inputs and both designs' results as markdown.
func Print(w io.Writer, in Inputs) {
	a, b := Simulate(in)
	placement := "connections placed at random over the nodes"
	if in.Affinity {
		placement = "each tenant's connections packed on as few nodes as hold them"
	}
	fmt.Fprintf(w, "### %s\n\n", placement)
	fmt.Fprintf(w, "deployment: %d nodes, %d tenants × %d partitions, %d connections, %.0f events/s of %.0f B, match %.3g, zipf %.2f, seed %d\n",
		in.Nodes, in.Tenants, in.Partitions, in.Connections, in.IngestEPS, in.EventBytes, in.MatchFraction, in.ZipfS, in.Seed)
	fmt.Fprintf(w, "limits: %d brokers × %.0f MB/s out, %d client connections each; nodes of %.0f cores, %.0f GB, %.0f MB/s in; %d partitions fetched per process\n\n",
		in.Brokers, in.BrokerEgressMBps, in.MaxConnsPerBroker, in.NodeCores, in.NodeMemGB, in.NodeNICMBps, in.MaxPartitionsPerFetcher)
	fmt.Fprintf(w, "| | %s | %s |\n|---|---|---|\n", a.Design, b.Design)
	row := func(name, f string, x, y any) {
		fmt.Fprintf(w, "| %s | "+f+" | "+f+" |\n", name, x, y)
	}
	row("Kafka egress for live delivery, MB/s", "%.0f", a.KafkaEgressMBps, b.KafkaEgressMBps)
	row("per broker, MB/s", "%.0f", a.PerBrokerMBps, b.PerBrokerMBps)
	row("Kafka read per node, MB/s", "%.1f", a.NodeReadMBps, b.NodeReadMBps)
	row("CPU per node, cores", "%.2f", a.NodeCores, b.NodeCores)
	row("memory per node, GB", "%.2f", a.NodeMemGB, b.NodeMemGB)
	row("partitions fetched per node (today) or worker", "%d", a.PartitionsPerFetch, b.PartitionsPerFetch)
	row("Kafka clients per node", "%d", a.ClientsPerNode, b.ClientsPerNode)
	row("client connections per broker", "%d", a.ConnsPerBroker, b.ConnsPerBroker)
	row("filter workers", "%d", a.Workers, b.Workers)
	row("deliveries/s, all nodes", "%.0f", a.DeliveriesPerSec, b.DeliveriesPerSec)
	row("limits passed", "%s", limitsText(a.Limits), limitsText(b.Limits))
	fmt.Fprintf(w, "\n| ingest, events/s | today: per-broker egress MB/s, node read MB/s, node cores | limits passed | workers: per-broker egress, node read, node cores, workers | limits passed |\n|---|---|---|---|---|\n")
	for _, eps := range []float64{100e3, 200e3, 500e3, 1e6, 2e6, 5e6} {
		x := in
		x.IngestEPS = eps
		a, b := Simulate(x)
		fmt.Fprintf(w, "| %.0fk | %.0f, %.0f, %.1f | %s | %.0f, %.0f, %.1f, %d | %s |\n", eps/1e3,
			a.PerBrokerMBps, a.NodeReadMBps, a.NodeCores, limitsText(a.Limits),
			b.PerBrokerMBps, b.NodeReadMBps, b.NodeCores, b.Workers, limitsText(b.Limits))
	}
	fmt.Fprintf(w, "\ntoday's design with the largest tenants on every node: at most %d nodes before the brokers' egress is spent on the live tail (at %.0f events/s); at most %.0f events/s before a node's %.0f cores are spent consuming and filtering\n",
		in.MaxNodesTailAll(), in.IngestEPS, in.MaxIngestTailAll(), in.NodeCores)
}

func limitsText(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, "; ")
}
