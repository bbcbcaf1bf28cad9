package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/internal/cli"
)

const benchFanoutSynopsis = "fanout (--gateway-bin PATH | --url URL [--gateway-pid PID]) [--kafka-brokers B] [--centrifugo-bin PATH | --centrifugo-url URL ... | --no-centrifugo] [--dialect r|d] [--subscribers 100,1000] [--transports sse,ws] [--duration D] [--warmup D] [--batch B] [--publishers P] [--window W] [--broker-pid PID] [--output text|json]"

const benchFanoutHelp = `N live subscribers and --publishers publish requests in flight, saturated: the
publishers send requests of --batch generated dialect R events as fast as
the subscribers take them (at most
--window events ahead of the average subscriber, so no server queue
overflows), and the figure is deliveries per CPU-second of the server process
(utime+stime from /proc/<pid>/stat over the window). The gateway is driven
through POST /events, GET /stream (SSE) and /socket (WebSocket); Centrifugo v6
through /api/batch, /connection/uni_sse and /connection/uni_websocket, with
every subscriber on one channel by its connection token. Each subscriber count
and transport runs the gateway then Centrifugo, so the ratio comes from one
run. "missing" counts deliveries that never came (published × subscribers −
delivered, once they stop arriving for 3s); "ended" counts subscribers the
server closed.

The broker: a started gateway uses --kafka-brokers, else its embedded broker
(--kafka-brokers "" overrides $KAFKA_BROKERS), which runs inside the gateway
process, so its CPU is already in the gateway's. With a Kafka broker,
--broker-pid PID adds its CPU over the window and a whole-system figure:
deliveries per CPU-second of gateway + broker. Centrifugo has no broker: its
whole-system figure is its own.
`

func cmdBenchFanout(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepbench", "fanout", benchFanoutSynopsis, stdout, stderr, benchFanoutHelp)
	var sf serverFlags
	sf.register(fs, true)
	subsList := fs.String("subscribers", "100,1000", "comma-separated subscriber counts, each at most 20000")
	transports := fs.String("transports", "sse,ws", "comma-separated transports: sse, ws")
	dialect := fs.String("dialect", "r", "dialect of the events and the gateway's streams: r (/stream, /socket) or d (/aep/events, /aep); Centrifugo gets the same event bytes")
	duration := fs.Duration("duration", 10*time.Second, "measured window of each run, at most 10m")
	warmup := fs.Duration("warmup", 2*time.Second, "publishing before each window opens")
	batch := fs.Int("batch", 100, "events per publish request, 1..1000")
	window := fs.Int("window", 0, "most events published ahead of the slowest subscriber (0: 500 for R, whose streams queue 1024; 200 for D, whose queue 256)")
	pubs := fs.Int("publishers", 4, "publish requests in flight, 1..64")
	dial := fs.Int("dial-concurrency", 64, "subscribers opened at once")
	brokerPID := fs.Int("broker-pid", 0, "the gateway's Kafka broker's process id on this machine: report its CPU over each window and deliveries per CPU-second of gateway + broker (not with the embedded broker, which the gateway's CPU counts)")
	out := cli.OutputFlag(fs, "text", "text", "json")
	progress := fs.Bool("progress", cli.IsTerminal(stderr), "print progress to stderr (default: when stderr is a terminal)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	counts, err := parseCounts(*subsList, 20000)
	switch {
	case err != nil:
		return cli.UsageErr(fs, "--subscribers: %v", err)
	case *duration <= 0 || *duration > maxBenchDuration || *warmup < 0:
		return cli.UsageErr(fs, "--duration must be within (0, %v], --warmup not negative", maxBenchDuration)
	case *batch < 1 || *batch > maxBenchBatch || (*window != 0 && *window < *batch) || *window < 0 || *dial < 1 || *pubs < 1 || *pubs > 64:
		return cli.UsageErr(fs, "--batch must be 1..%d, --window at least --batch, --dial-concurrency at least 1, --publishers 1..64", maxBenchBatch)
	case fs.NArg() > 0:
		return cli.UsageErr(fs, "unexpected argument %q", fs.Arg(0))
	}
	trs, err := parseTransports(*transports)
	if err != nil {
		return cli.UsageErr(fs, "--transports: %v", err)
	}
	d, ok := cli.DialectFlag(*dialect)
	if !ok || *dialect == "" {
		return cli.UsageErr(fs, "--dialect %q: want r or d", *dialect)
	}
	if *window == 0 {
		*window = 500
		if d == aep.DialectD {
			*window = 200
		}
	}
	if err := sf.validate(); err != nil {
		return cli.UsageErr(fs, "%v", err)
	}
	broker := ""
	switch {
	case *brokerPID < 0:
		return cli.UsageErr(fs, "--broker-pid must be a process id")
	case *brokerPID > 0 && sf.gatewayBin != "" && sf.kafka == "":
		return cli.UsageErr(fs, "--broker-pid with the embedded broker: it runs inside the gateway, whose CPU already counts it")
	case *brokerPID > 0:
		broker = "kafka"
	case sf.gatewayBin != "" && sf.kafka == "":
		broker = "embedded"
	}
	say := progressFunc(stderr, *progress)
	if _, err := raiseNoFile(); err != nil {
		say("cannot raise the open-file limit: %v", err)
	}
	srv, err := sf.start(ctx, say)
	if err != nil {
		return err
	}
	defer srv.stop()
	srv.gateway.dialect = d
	rep := FanoutReport{}
	for _, n := range counts {
		for _, tr := range trs {
			for _, np := range srv.peers() {
				cfg := FanoutConfig{Transport: tr, Subscribers: n, Duration: *duration,
					Dialect: d, Warmup: *warmup, Batch: *batch, Window: *window, Publishers: *pubs, Dial: *dial, Progress: say}
				if np.name == "gateway" { // Centrifugo has no broker
					cfg.BrokerPID, cfg.Broker = *brokerPID, broker
				}
				r, err := runFanout(ctx, np.name, np.p, cfg)
				if err != nil { // reported, and the other runs still go
					err = fmt.Errorf("fanout %s %s ×%d: %w", np.name, tr, n, err)
					say("%v", err)
					rep.Errors = append(rep.Errors, err.Error())
					continue
				}
				say("%s %s ×%d: %.0f deliveries per CPU-second, %d missing, %d publish retries", np.name, tr, n, r.PerCPUSec(), r.Missing, r.Retries)
				rep.Runs = append(rep.Runs, r)
			}
		}
	}
	rep.LoadAvg = loadAvg()
	rep.ratios()
	if *out == "json" {
		err = cli.WriteJSONLine(stdout, rep)
	} else {
		printFanout(stdout, rep)
	}
	if err == nil && len(rep.Errors) > 0 {
		err = fmt.Errorf("%d of the runs failed", len(rep.Errors))
	}
	return err
}

// progressFunc prints a progress line to w when on, else nothing.
func progressFunc(w io.Writer, on bool) func(string, ...any) {
	if !on {
		return func(string, ...any) {}
	}
	return func(format string, args ...any) {
		fmt.Fprintf(w, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
}

// parseCounts parses "100,1000" into counts within 1..most.
func parseCounts(s string, most int) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > most {
			return nil, fmt.Errorf("%q: want counts 1..%d", f, most)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseTransports(s string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		switch f = strings.TrimSpace(f); f {
		case transportSSE, transportWS:
			out = append(out, f)
		default:
			return nil, fmt.Errorf("%q: want sse or ws", f)
		}
	}
	return out, nil
}

var _ flag.Value = (*stringList)(nil)
