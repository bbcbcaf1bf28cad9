package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/aep-gateway/aep-gateway/internal/cli"
)

// Exit codes, as aepctl's: 0 ok, 1 a run failed or its events were not all
// accepted, 2 usage.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// errRejected: the run ended but some of its events were not accepted.
var errRejected = errors.New("some events were not accepted")

func main() { cli.Main(run) }

const topUsage = `aepbench: load tests for aep-gateway, bounded in time and events, each
beside a baseline measured in the same run.

Usage:
  aepbench ingest [flags]   post generated events at a target rate (--rate,
                            open loop) or as fast as possible (--max) and
                            report accepted events/s and request latency;
                            --baseline-kafka BROKERS runs the same events
                            straight into Kafka for a ratio from the same run;
                            --baseline-routed adds a phase whose records carry
                            the gateway's key and routing headers too;
                            --baseline-http sends the same requests to a
                            server that only reads them and answers 202
  aepbench fanout [flags]   publishers (--publishers, --batch events a
                            request), N live subscribers over SSE and
                            WebSocket, saturated: deliveries per CPU-second
                            of the server process (and of the broker with
                            --broker-pid), gateway vs Centrifugo v6
  aepbench latency [flags]  publish→SSE delivery percentiles at fixed rates,
                            gateway vs produce→consume straight on Kafka
  aepbench idle [flags]     N idle SSE and WebSocket connections: RSS per
                            connection of the server, gateway vs Centrifugo,
                            then all closed at once (peak RSS)
  aepbench cleanup --kafka-brokers B --prefix aepctl.bench.RUN.
                            delete a run's topics from a shared broker
  aepbench http-sink --listen HOST:PORT
                            the server of ingest --baseline-http, which
                            starts and stops it: reads requests, answers 202

fanout, latency and idle start the servers they measure (--gateway-bin, and
Centrifugo from PATH or $GOPATH/bin) or are pointed at running ones (--url
with --gateway-pid; --centrifugo-url with --centrifugo-pid).
The target must be on loopback unless --allow-remote (ingest). Progress goes
to stderr; the report to stdout, as text or, with --output json, one JSON
object. Every report carries the load average of the run.
Run "aepbench <name> --help" for every flag; docs/aepbench.md and
docs/benchmarks.md explain the measurements.
Exit codes: 0 ok, 1 a run failed or events were not accepted, 2 usage.
`

// run is the whole command; it returns the exit code.
func run(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, topUsage)
		return exitUsage
	}
	var err error
	switch args[0] {
	case "ingest":
		err = cmdBenchIngest(ctx, args[1:], stdout, stderr)
	case "fanout":
		err = cmdBenchFanout(ctx, args[1:], stdout, stderr)
	case "latency":
		err = cmdBenchLatency(ctx, args[1:], stdout, stderr)
	case "idle":
		err = cmdBenchIdle(ctx, args[1:], stdout, stderr)
	case "cleanup":
		err = cmdBenchCleanup(args[1:], stdout, stderr)
	case "http-sink": // the server of ingest --baseline-http
		err = cmdBenchHTTPSink(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "-help", "help":
		if len(args) > 1 {
			return run(ctx, []string{args[1], "--help"}, nil, stdout, stderr)
		}
		fmt.Fprint(stdout, topUsage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "aepbench: unknown benchmark %q\n\n%s", args[0], topUsage)
		return exitUsage
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, cli.ErrUsage):
		return exitUsage
	case errors.Is(err, errRejected):
		return exitFailed
	}
	cli.WriteError(stderr, "aepbench", err, cli.JSONOutput(args[1:]))
	return exitFailed
}
