// Command aepbench is the benchmark harness of aep-gateway, apart from the
// client aepctl so that the CLI users install stays a client.
//
//	aepbench ingest [flags]                 bounded load against a gateway on loopback
//	aepbench fanout|latency|idle [flags]    streaming benchmarks beside Centrifugo or Kafka
//	aepbench cleanup --kafka-brokers B --prefix aepctl.bench.RUN.
//
// It uses the same gateway client (internal/aepclient), event generator
// (internal/eventgen) and flag plumbing (internal/cli) as aepctl; ingest
// takes aepctl's --url/--token/--profile with $AEPCTL_URL, $AEPCTL_TOKEN and
// aepctl's config file behind them.
//
// [RunBench] runs the ingest load loop. It owns every goroutine it starts
// (one dispatcher and Concurrency workers per phase), joins them before it
// returns, and passes batches through a channel bounded to Concurrency
// entries. The fanout, latency and idle runners start the servers they
// measure as child processes and stop them before they return.
//
// Exit codes: 0 ok, 1 a run failed or events were not accepted, 2 usage.
// See docs/aepbench.md and docs/benchmarks.md.
package main
