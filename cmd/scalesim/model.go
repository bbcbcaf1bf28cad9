package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Inputs of the model. The per-unit costs come from this repository's
// benches (docs/scaling.md cites each); the deployment shape and the
// hardware limits are assumptions, flags of the command.
type Inputs struct {
	Nodes       int     // gateway nodes
	Tenants     int     // tenants, each with its own topic
	Connections int     // live stream connections, all nodes together
	IngestEPS   float64 // events/s into Kafka, all tenants together
	EventBytes  float64 // bytes per record on the wire (value + headers + framing)
	Partitions  int     // partitions per tenant topic
	ZipfS       float64 // skew of tenants' ingest and connection shares (s > 1)
	// MatchFraction is the share of its tenant's events one subscription
	// matches (a dashboard of one session: small; a tenant-wide tail: 1).
	MatchFraction float64
	Seed          uint64
	// Affinity places a tenant's connections on as few nodes as hold them
	// (a tenant-aware load balancer); false spreads every connection over
	// all nodes at random (a plain one).
	Affinity bool

	// Measured costs.
	ConnRSS          float64 // bytes of RSS per idle connection (bench idle)
	SubBytes         float64 // bytes per subscription in the filter index (BenchmarkSubscriptionMemory)
	DeliveriesPerCPU float64 // deliveries per CPU-second, SSE (bench fanout)
	FilterNs         float64 // ns to route one event through a node's index (filtering BenchmarkRoute100k)
	ConsumeNs        float64 // ns of CPU to fetch and decode one record (assumed; see docs/scaling.md)
	ForwardNs        float64 // ns of CPU to produce one forwarded record (worker design; from bench ingest's direct baseline)

	// Limits.
	Brokers                 int
	BrokerEgressMBps        float64 // per broker, network out
	NodeNICMBps             float64 // per gateway node, network in
	NodeCores               float64
	NodeMemGB               float64
	MaxPartitionsPerFetcher int // partitions one consumer client can fetch before fetch sessions dominate
	MaxConnsPerBroker       int // client connections one broker serves
}

// tenant is one tenant of the simulated deployment.
type tenant struct {
	eps   float64 // events/s
	conns int
	nodes int // nodes holding at least one of its connections
}

// Result is one design's load, totals and the busiest node.
type Result struct {
	Design             string
	KafkaEgressMBps    float64 // all brokers, for live delivery
	PerBrokerMBps      float64
	NodeReadMBps       float64 // per node (max)
	NodeCores          float64 // per node (max): consume + filter + deliver (+ forward)
	NodeMemGB          float64 // per node (max): connections + subscriptions
	PartitionsPerFetch int     // partitions one node (or worker) fetches, all its clients together
	ClientsPerNode     int     // Kafka consumer clients per node (today: one tail per tenant held)
	ConnsPerBroker     int     // client connections each broker holds for live delivery
	Workers            int     // filter workers (worker design)
	DeliveriesPerSec   float64 // all nodes
	Limits             []string
}

// tenants draws the deployment: Zipf shares of ingest and connections,
// connections spread uniformly at random over the nodes.
func (in Inputs) tenants() []tenant {
	r := rand.New(rand.NewPCG(in.Seed, in.Seed^0x9e3779b97f4a7c15))
	w := make([]float64, in.Tenants)
	var sum float64
	for i := range w {
		w[i] = 1 / math.Pow(float64(i+1), in.ZipfS)
		sum += w[i]
	}
	ts := make([]tenant, in.Tenants)
	left := in.Connections
	for i := range ts {
		ts[i].eps = in.IngestEPS * w[i] / sum
		c := int(math.Floor(float64(in.Connections) * w[i] / sum))
		c = min(c, left)
		ts[i].conns, left = c, left-c
	}
	for i := 0; left > 0; i = (i + 1) % len(ts) { // rounding remainder
		ts[i].conns++
		left--
	}
	capacity := max(1, in.Connections/in.Nodes)
	for i := range ts {
		c, n := ts[i].conns, in.Nodes
		if in.Affinity {
			ts[i].nodes = min(n, max(1, (c+capacity-1)/capacity))
			continue
		}
		// Distinct nodes hit by c uniform placements over n nodes, sampled
		// (bounded work: at most 4n draws).
		if c >= 4*n {
			ts[i].nodes = n
			continue
		}
		seen := map[int]bool{}
		for range c {
			seen[r.IntN(n)] = true
		}
		ts[i].nodes = len(seen)
	}
	return ts
}

// Simulate runs both designs on the same drawn deployment.
func Simulate(in Inputs) (tailAll, workers Result) {
	ts := in.tenants()
	var deliveries, forwardedEPS, tailedEPS, tailedParts, tailConns float64
	fanIn := float64(min(in.Partitions, in.Brokers)) // brokers one topic's client talks to
	for _, t := range ts {
		if t.conns == 0 {
			continue
		}
		// Today a node tails the topic of every tenant it holds a
		// connection of.
		tailedEPS += t.eps * float64(t.nodes)
		tailedParts += float64(in.Partitions * t.nodes)
		tailConns += float64(t.nodes) * fanIn
		deliveries += t.eps * in.MatchFraction * float64(t.conns)
		// A matched event is forwarded once to each node with a matching
		// subscription; with MatchFraction per subscription and the tenant's
		// subscriptions on t.nodes nodes, each node sees a share of the events
		// bounded by its own subscriptions' union.
		perNode := float64(t.conns) / math.Max(1, float64(t.nodes))
		nodeShare := 1 - math.Pow(1-in.MatchFraction, perNode)
		forwardedEPS += t.eps * nodeShare * float64(t.nodes)
	}
	perNodeConns := float64(in.Connections) / float64(in.Nodes)
	perNodeDeliveries := deliveries / float64(in.Nodes)
	mem := (perNodeConns*in.ConnRSS + perNodeConns*in.SubBytes) / 1e9
	mbps := func(eps float64) float64 { return eps * in.EventBytes / 1e6 }

	// Today: every node tails the whole topic of each tenant it holds.
	nodeEPS := tailedEPS / float64(in.Nodes)
	tailAll = Result{Design: "nodes tail their tenants' topics (today)", DeliveriesPerSec: deliveries}
	tailAll.KafkaEgressMBps = mbps(tailedEPS)
	tailAll.PerBrokerMBps = tailAll.KafkaEgressMBps / float64(in.Brokers)
	tailAll.NodeReadMBps = mbps(nodeEPS)
	tailAll.NodeCores = nodeEPS*(in.ConsumeNs+in.FilterNs)/1e9 + perNodeDeliveries/in.DeliveriesPerCPU
	tailAll.NodeMemGB = mem
	tailAll.PartitionsPerFetch = int(math.Ceil(tailedParts / float64(in.Nodes)))
	tailAll.ClientsPerNode = int(math.Ceil(tailedParts / float64(in.Nodes) / float64(in.Partitions)))
	tailAll.ConnsPerBroker = int(math.Ceil(tailConns / float64(in.Brokers)))

	// Filter workers: a consumer group reads each partition once, evaluates
	// every subscription and produces matches to the holding nodes' topic.
	workers = Result{Design: "filter workers forward matches (proposed)", DeliveriesPerSec: deliveries}
	filterCores := in.IngestEPS*(in.ConsumeNs+in.FilterNs)/1e9 + forwardedEPS*in.ForwardNs/1e9
	// Enough workers for the CPU (at 70% busy) and for the partitions.
	workers.Workers = max(int(math.Ceil(filterCores/(in.NodeCores*0.7))),
		(in.Tenants*in.Partitions+in.MaxPartitionsPerFetcher-1)/in.MaxPartitionsPerFetcher)
	workers.KafkaEgressMBps = mbps(in.IngestEPS) + mbps(forwardedEPS)
	workers.PerBrokerMBps = workers.KafkaEgressMBps / float64(in.Brokers)
	workers.NodeReadMBps = mbps(forwardedEPS) / float64(in.Nodes)
	workers.NodeCores = forwardedEPS/float64(in.Nodes)*in.ConsumeNs/1e9 + perNodeDeliveries/in.DeliveriesPerCPU
	workers.NodeMemGB = mem
	workers.PartitionsPerFetch = int(math.Ceil(float64(in.Tenants*in.Partitions) / float64(max(workers.Workers, 1))))
	workers.ClientsPerNode = 1
	// Every worker talks to every broker (it reads all topics and writes
	// every node's partition); every node reads its own partition.
	workers.ConnsPerBroker = workers.Workers + in.Nodes

	for _, r := range []*Result{&tailAll, &workers} {
		r.Limits = in.limits(*r)
	}
	return tailAll, workers
}

// limits names every limit a design's load passes.
func (in Inputs) limits(r Result) []string {
	var out []string
	check := func(name string, load, limit float64, unit string) {
		if load > limit {
			out = append(out, fmt.Sprintf("%s: %.0f %s > %.0f", name, load, unit, limit))
		}
	}
	check("broker egress", r.PerBrokerMBps, in.BrokerEgressMBps, "MB/s")
	check("node network in", r.NodeReadMBps, in.NodeNICMBps, "MB/s")
	check("node CPU", r.NodeCores, in.NodeCores, "cores")
	check("node memory", r.NodeMemGB, in.NodeMemGB, "GB")
	check("partitions fetched per process", float64(r.PartitionsPerFetch), float64(in.MaxPartitionsPerFetcher), "partitions")
	check("connections per broker", float64(r.ConnsPerBroker), float64(in.MaxConnsPerBroker), "connections")
	sort.Strings(out)
	return out
}

// MaxNodesTailAll is the most nodes today's design supports, with every
// tenant on every node (random placement of large tenants), before the
// brokers' egress is spent on the live tail alone.
func (in Inputs) MaxNodesTailAll() int {
	per := in.IngestEPS * in.EventBytes / 1e6
	return int(float64(in.Brokers) * in.BrokerEgressMBps / per)
}

// MaxIngestTailAll is the most events/s today's design supports at
// in.Nodes before a node's CPU is spent on consuming and filtering alone.
func (in Inputs) MaxIngestTailAll() float64 {
	return in.NodeCores * 1e9 / (in.ConsumeNs + in.FilterNs)
}
