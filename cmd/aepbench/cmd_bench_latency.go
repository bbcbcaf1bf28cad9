package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/aep-gateway/aep-gateway/internal/cli"
)

const benchLatencySynopsis = "latency (--gateway-bin PATH | --url URL) --kafka-brokers B [--rates 500,1000,2000] [--duration D] [--rounds N] [--concurrency C] [--output text|json]"

const benchLatencyHelp = `Publish→deliver latency at fixed rates, open loop, one event per request:
the gateway path posts each event to POST /events and times its arrival on one
GET /stream subscriber; the direct path produces the same events with franz-go
(acks=all, idempotent, lz4, keyed by session) to a topic of the same Kafka and
times their arrival at a franz-go consumer in the same process. Each rate runs
both paths, alternating in --rounds slices of --duration/--rounds each (so a
machine whose load changes weighs on both paths alike), and merges each
path's slices; "added p99" is the gateway's p99 minus direct's. "lost"
counts events not seen within 5s of a slice's end.
`

func cmdBenchLatency(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepbench", "latency", benchLatencySynopsis, stdout, stderr, benchLatencyHelp)
	var sf serverFlags
	sf.register(fs, false)
	rates := fs.String("rates", "1000", "comma-separated rates in events/s, each 1..100000")
	duration := fs.Duration("duration", 10*time.Second, "length of each phase, at most 10m")
	conc := fs.Int("concurrency", 32, "requests in flight at most, 1..256")
	rounds := fs.Int("rounds", 4, "alternating slices of each path per rate, 1..100")
	out := cli.OutputFlag(fs, "text", "text", "json")
	progress := fs.Bool("progress", cli.IsTerminal(stderr), "print progress to stderr (default: when stderr is a terminal)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	rs, err := parseRates(*rates)
	switch {
	case err != nil:
		return cli.UsageErr(fs, "--rates: %v", err)
	case *duration <= 0 || *duration > maxBenchDuration:
		return cli.UsageErr(fs, "--duration must be within (0, %v]", maxBenchDuration)
	case *conc < 1 || *conc > maxBenchWorkers || *rounds < 1 || *rounds > 100:
		return cli.UsageErr(fs, "--concurrency must be 1..%d, --rounds 1..100", maxBenchWorkers)
	case sf.kafka == "":
		return cli.UsageErr(fs, "--kafka-brokers (or $KAFKA_BROKERS) is needed: the direct baseline and the gateway share that Kafka")
	case fs.NArg() > 0:
		return cli.UsageErr(fs, "unexpected argument %q", fs.Arg(0))
	}
	if err := sf.validate(); err != nil {
		return cli.UsageErr(fs, "%v", err)
	}
	say := progressFunc(stderr, *progress)
	srv, err := sf.start(ctx, say)
	if err != nil {
		return err
	}
	defer srv.stop()
	topic := "aepctl.bench.latency." + strconv.FormatInt(time.Now().UnixNano(), 36)
	defer deleteTopics(srv.kafka, topic)
	rep := LatencyReport{}
	for _, r := range rs {
		cfg := LatencyConfig{Rate: r, Duration: *duration / time.Duration(*rounds), Concurrency: *conc, Progress: say}
		var g, d LatencyResult
		for i := range *rounds {
			say("gateway at %.0f events/s for %v (round %d of %d)", r, cfg.Duration, i+1, *rounds)
			x, err := gatewayLatency(ctx, srv.gateway, cfg)
			if err != nil {
				return fmt.Errorf("latency, gateway at %.0f/s: %w", r, err)
			}
			g = g.merge(x)
			say("direct at %.0f events/s for %v (round %d of %d)", r, cfg.Duration, i+1, *rounds)
			if x, err = directLatency(ctx, srv.kafka, topic, cfg); err != nil {
				return fmt.Errorf("latency, direct at %.0f/s: %w", r, err)
			}
			d = d.merge(x)
		}
		rep.Runs = append(rep.Runs, g, d)
	}
	rep.LoadAvg = loadAvg()
	if *out == "json" {
		err = cli.WriteJSONLine(stdout, latencyReportJSON(rep))
	} else {
		printLatency(stdout, rep)
	}
	if err != nil {
		return err
	}
	for _, x := range rep.Runs {
		if x.Lost > 0 {
			return errors.New("some events were not delivered")
		}
	}
	return nil
}

func parseRates(s string) ([]float64, error) {
	var out []float64
	for f := range strings.SplitSeq(s, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || r < 1 || r > 100000 {
			return nil, fmt.Errorf("%q: want rates 1..100000", f)
		}
		out = append(out, r)
	}
	return out, nil
}

// latencyJSON is the report in milliseconds, with the added p99 per rate.
func latencyReportJSON(r LatencyReport) any {
	type run struct {
		Path    string      `json:"path"`
		Rate    float64     `json:"rate"`
		Sent    int64       `json:"sent"`
		Lost    int64       `json:"lost"`
		Rounds  int         `json:"rounds"`
		Latency latencyJSON `json:"latency_ms"`
	}
	out := struct {
		LoadAvg  string             `json:"load_average"`
		Runs     []run              `json:"runs"`
		AddedP99 map[string]float64 `json:"added_p99_ms"`
	}{LoadAvg: r.LoadAvg, AddedP99: map[string]float64{}}
	for _, x := range r.Runs {
		out.Runs = append(out.Runs, run{x.Path, x.Rate, x.Sent, x.Lost, x.Rounds, toLatencyJSON(x.Latency)})
		if d, ok := r.AddedP99(x.Rate); ok {
			out.AddedP99[strconv.FormatFloat(x.Rate, 'f', -1, 64)] = ms(d)
		}
	}
	return out
}
