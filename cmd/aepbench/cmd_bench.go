package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/aep-gateway/aep-gateway/internal/cli"
)

const benchSynopsis = "ingest [--dialect r|d] [--url URL] [--token KEY] [--rate R | --max] [--duration D] [--events N] [--concurrency C] [--batch B] [--transport http|ws] [--sessions S] [--size BYTES] [--baseline-kafka BROKERS [--baseline-routed]] [--baseline-http] [--gateway-pid PID] [--broker-pid PID] [--allow-remote] [--output text|json] [--progress]"

func cmdBenchIngest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepbench", "ingest", benchSynopsis, stdout, stderr)
	var conn cli.ConnFlags
	conn.Register(fs)
	dialect := fs.String("dialect", "r", "dialect of the events: r or d")
	rate := fs.Float64("rate", 1000, "target events/s (open loop: batches leave on schedule)")
	maxRate := fs.Bool("max", false, "send as fast as the workers go instead of --rate")
	duration := fs.Duration("duration", 10*time.Second, "length of each phase, at most 10m")
	events := fs.Int("events", 0, "most events per phase (0: rate×duration, or 10,000,000 with --max)")
	conc := fs.Int("concurrency", 4, "requests in flight")
	batch := fs.Int("batch", 100, "events per request, at most 1000")
	transport := fs.String("transport", "http", "http: POST batches (NDJSON); ws: one WebSocket message per event on --concurrency held connections (R /socket as an emitter, D /aep after session.opened), --batch events between answers checked")
	sessions := fs.Int("sessions", 100, "sessions the events are spread over")
	size := fs.Int("size", 0, "pad each event to about this many bytes (0: no padding, ~235 B events)")
	baseline := fs.String("baseline-kafka", "", "comma-separated Kafka brokers: also produce the same events straight to Kafka for the same duration")
	baselineTopic := fs.String("baseline-topic", "aepctl.bench.baseline", "topic of the Kafka baseline (created when missing)")
	baselineRouted := fs.Bool("baseline-routed", false, "with --baseline-kafka, also produce the records the gateway writes (session key, routing headers, the event): the record format's own cost, the floor of any gateway")
	baselineHTTP := fs.Bool("baseline-http", false, "also send the same requests to a server that only reads them and answers 202 (aepbench http-sink, started as a child process): what HTTP itself costs here")
	baselineParts := fs.Int("baseline-partitions", 12, "partitions of a created baseline topic (the gateway's default for tenant topics)")
	gatewayPID := fs.Int("gateway-pid", 0, "the gateway's process id on this machine: report its CPU time per event in each phase")
	brokerPID := fs.Int("broker-pid", 0, "the Kafka broker's process id on this machine (not with the gateway's embedded broker, which --gateway-pid counts): report its CPU time per event")
	allowRemote := fs.Bool("allow-remote", false, "allow a gateway or broker that is not on loopback")
	timeout := fs.Duration("request-timeout", defaultReqTimeout, "bound on one request")
	out := cli.OutputFlag(fs, "text", "text", "json")
	progress := fs.Bool("progress", cli.IsTerminal(stderr), "print phases and events/s every second to stderr (default: when stderr is a terminal)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	d, ok := cli.DialectFlag(*dialect)
	switch {
	case !ok || *dialect == "":
		return cli.UsageErr(fs, "--dialect %q: want r or d", *dialect)
	case !*maxRate && *rate <= 0:
		return cli.UsageErr(fs, "--rate must be positive (or use --max)")
	case *duration <= 0 || *duration > maxBenchDuration:
		return cli.UsageErr(fs, "--duration must be within (0, %v]", maxBenchDuration)
	case *events < 0, *conc < 1, *conc > maxBenchWorkers, *batch < 1, *batch > maxBenchBatch, *sessions < 1, *size < 0, *size > 1<<20, *baselineParts < 1, *gatewayPID < 0, *brokerPID < 0:
		return cli.UsageErr(fs, "a numeric flag is out of range (concurrency 1..%d, batch 1..%d, sessions ≥ 1, size 0..1048576)", maxBenchWorkers, maxBenchBatch)
	case *transport != "http" && *transport != "ws":
		return cli.UsageErr(fs, "--transport %q: want http or ws", *transport)
	case fs.NArg() > 0:
		return cli.UsageErr(fs, "unexpected argument %q", fs.Arg(0))
	}
	if err := conn.Resolve(); err != nil {
		return err
	}
	cfg := BenchConfig{Dialect: d, WebSocket: *transport == "ws", URL: conn.URL, Token: conn.Token, Rate: *rate, Duration: *duration, MaxEvents: *events,
		Concurrency: *conc, Batch: *batch, Sessions: *sessions, Size: *size, AllowRemote: *allowRemote,
		RequestTimeout: *timeout, BaselineTopic: *baselineTopic, BaselinePartitions: *baselineParts,
		GatewayPID: *gatewayPID, BrokerPID: *brokerPID, BaselineHTTP: *baselineHTTP}
	if *maxRate {
		cfg.Rate = 0
	}
	if *progress {
		cfg.Progress = stderr
	}
	if *baseline != "" {
		cfg.BaselineBrokers = strings.Split(*baseline, ",")
		cfg.BaselineRouted = *baselineRouted
	} else if *baselineRouted {
		return cli.UsageErr(fs, "--baseline-routed needs --baseline-kafka")
	}
	if err := cfg.withDefaults().validate(); err != nil {
		return cli.UsageErr(fs, "%v", err)
	}
	rep, err := RunBench(ctx, cfg)
	if err != nil {
		return err
	}
	if *out == "json" {
		if err := cli.WriteJSONLine(stdout, benchJSON(rep)); err != nil {
			return err
		}
	} else {
		printBench(stdout, rep)
	}
	if rep.Gateway.Accepted == 0 || rep.Gateway.Rejected > 0 || rep.Gateway.Failed > 0 {
		return errRejected
	}
	for _, b := range []*PhaseReport{rep.Baseline, rep.Routed, rep.HTTPFloor} {
		if b != nil && (b.Accepted == 0 || b.Failed > 0) {
			return errRejected
		}
	}
	return nil
}

// printBench writes the report as aligned text.
func printBench(w io.Writer, r BenchReport) {
	c := r.Config
	target := "max"
	if c.Rate > 0 {
		target = fmt.Sprintf("%.0f events/s", c.Rate)
	}
	tr := "http"
	if c.WebSocket {
		tr = "ws"
	}
	fmt.Fprintf(w, "bench ingest: dialect %s, transport %s, target %s, duration %v, concurrency %d, batch %d, sessions %d, event size %s\n",
		c.Dialect, tr, target, c.Duration, c.Concurrency, c.Batch, c.Sessions, sizeText(c.Size))
	printPhase(w, r.Gateway)
	for _, p := range []*PhaseReport{r.Baseline, r.Routed, r.HTTPFloor} {
		if p == nil {
			continue
		}
		printPhase(w, *p)
		fmt.Fprintf(w, "ratio gateway/%s accepted events/s: %.2f\n", p.Name, r.ratioTo(p))
		if cr := r.cpuRatioTo(p); cr > 0 {
			fmt.Fprintf(w, "ratio %s/gateway CPU time per event (measured processes): %.2f\n", p.Name, cr)
		}
	}
	if r.HTTPFloor != nil && r.Baseline != nil && r.Baseline.AcceptedPerSec() > 0 {
		fmt.Fprintf(w, "ratio http-floor/kafka accepted events/s: %.2f\n", r.HTTPFloor.AcceptedPerSec()/r.Baseline.AcceptedPerSec())
	}
	fmt.Fprintf(w, "load average: %s\n", loadAvg())
}

func sizeText(n int) string {
	if n == 0 {
		return "bare (~235 B)"
	}
	return fmt.Sprintf("~%d B", n)
}

func printPhase(w io.Writer, p PhaseReport) {
	fmt.Fprintf(w, "%-8s %s\n", p.Name+":", p.Target)
	fmt.Fprintf(w, "  accepted %d events in %v: %.0f events/s; sent %d, rejected %d, failed %d, requests %d\n",
		p.Accepted, p.Elapsed.Round(time.Millisecond), p.AcceptedPerSec(), p.Events, p.Rejected, p.Failed, p.Requests)
	l := p.Latency
	fmt.Fprintf(w, "  latency per request: p50 %v  p90 %v  p99 %v  max %v  mean %v\n",
		rnd(l.P50), rnd(l.P90), rnd(l.P99), rnd(l.Max), rnd(l.Mean))
	if l := p.FromSchedule; l.Count > 0 {
		fmt.Fprintf(w, "  latency from schedule: p50 %v  p90 %v  p99 %v  max %v\n", rnd(l.P50), rnd(l.P90), rnd(l.P99), rnd(l.Max))
	}
	var parts []string
	for _, k := range sortedStatuses(p.ByStatus) {
		parts = append(parts, fmt.Sprintf("%s×%d", k, p.ByStatus[k]))
	}
	fmt.Fprintf(w, "  requests by status: %s\n", strings.Join(parts, "  "))
	c := p.CPU
	fmt.Fprintf(w, "  CPU per event: aepctl %.2fµs", p.PerEvent(c.Client))
	if c.Gateway > 0 {
		fmt.Fprintf(w, "  %s %.2fµs", cmp.Or(p.Server, "gateway"), p.PerEvent(c.Gateway))
	}
	if c.Broker > 0 {
		fmt.Fprintf(w, "  broker %.2fµs", p.PerEvent(c.Broker))
	}
	fmt.Fprintf(w, "  total %.2fµs\n", p.PerEvent(c.Total()))
	if p.Behind {
		fmt.Fprintln(w, "  note: the dispatcher fell more than 1s behind the target rate")
	}
}

func rnd(d time.Duration) time.Duration {
	switch {
	case d > 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// phaseJSON is a PhaseReport for --output json: rates in events/s,
// latencies in milliseconds.
type phaseJSON struct {
	Name           string         `json:"name"`
	Target         string         `json:"target"`
	ElapsedMS      float64        `json:"elapsed_ms"`
	Events         int            `json:"events"`
	Accepted       int            `json:"accepted"`
	Rejected       int            `json:"rejected"`
	Failed         int            `json:"failed"`
	Requests       int            `json:"requests"`
	AcceptedPerS   float64        `json:"accepted_per_sec"`
	Latency        latencyJSON    `json:"latency_ms"`
	FromSchedule   *latencyJSON   `json:"from_schedule_ms,omitempty"`
	ByStatus       map[string]int `json:"requests_by_status"`
	BehindSchedule bool           `json:"behind_schedule"`
	CPU            cpuJSON        `json:"cpu_us_per_event"`
}

// cpuJSON is CPU time per accepted event in microseconds; gateway and
// broker are omitted when their process was not given; sink is the
// http-floor phase's server in the gateway's place.
type cpuJSON struct {
	Client  float64  `json:"aepctl"`
	Gateway *float64 `json:"gateway,omitempty"`
	Sink    *float64 `json:"sink,omitempty"`
	Broker  *float64 `json:"broker,omitempty"`
	Total   float64  `json:"total"`
}

func toCPUJSON(p PhaseReport, cfg BenchConfig) cpuJSON {
	j := cpuJSON{Client: p.PerEvent(p.CPU.Client), Total: p.PerEvent(p.CPU.Total())}
	switch {
	case p.Server == "sink":
		v := p.PerEvent(p.CPU.Gateway)
		j.Sink = &v
	case cfg.GatewayPID > 0:
		v := p.PerEvent(p.CPU.Gateway)
		j.Gateway = &v
	}
	if cfg.BrokerPID > 0 && p.Server == "" {
		v := p.PerEvent(p.CPU.Broker)
		j.Broker = &v
	}
	return j
}

type latencyJSON struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func toLatencyJSON(l LatencySummary) latencyJSON {
	return latencyJSON{P50: ms(l.P50), P90: ms(l.P90), P99: ms(l.P99), Max: ms(l.Max), Mean: ms(l.Mean)}
}

func toPhaseJSON(p PhaseReport, cfg BenchConfig) phaseJSON {
	j := phaseJSON{CPU: toCPUJSON(p, cfg), Name: p.Name, Target: p.Target, ElapsedMS: ms(p.Elapsed), Events: p.Events, Accepted: p.Accepted,
		Rejected: p.Rejected, Failed: p.Failed, Requests: p.Requests, AcceptedPerS: p.AcceptedPerSec(),
		Latency: toLatencyJSON(p.Latency), ByStatus: p.ByStatus, BehindSchedule: p.Behind}
	if p.FromSchedule.Count > 0 {
		l := toLatencyJSON(p.FromSchedule)
		j.FromSchedule = &l
	}
	return j
}

// benchJSON is the report of --output json.
func benchJSON(r BenchReport) any {
	c := r.Config
	out := struct {
		Dialect     string     `json:"dialect"`
		Rate        float64    `json:"target_rate"` // 0: --max
		DurationMS  float64    `json:"duration_ms"`
		Concurrency int        `json:"concurrency"`
		Batch       int        `json:"batch"`
		WebSocket   bool       `json:"websocket,omitempty"`
		Sessions    int        `json:"sessions"`
		Size        int        `json:"size"`
		Gateway     phaseJSON  `json:"gateway"`
		Baseline    *phaseJSON `json:"baseline,omitempty"`
		Ratio       *float64   `json:"ratio_gateway_kafka,omitempty"`
		CPURatio    *float64   `json:"cpu_ratio_kafka_gateway,omitempty"`
		Routed      *phaseJSON `json:"baseline_routed,omitempty"`
		RoutedRatio *float64   `json:"ratio_gateway_kafka_routed,omitempty"`
		RoutedCPU   *float64   `json:"cpu_ratio_kafka_routed_gateway,omitempty"`
		HTTPFloor   *phaseJSON `json:"baseline_http,omitempty"`
		HTTPRatio   *float64   `json:"ratio_gateway_http_floor,omitempty"`
		HTTPCPU     *float64   `json:"cpu_ratio_http_floor_gateway,omitempty"`
		LoadAvg     string     `json:"load_average"`
	}{LoadAvg: loadAvg(), Dialect: c.Dialect.String(), Rate: c.Rate, DurationMS: ms(c.Duration), Concurrency: c.Concurrency, Batch: c.Batch, WebSocket: c.WebSocket,
		Sessions: c.Sessions, Size: c.Size, Gateway: toPhaseJSON(r.Gateway, c)}
	out.Baseline, out.Ratio, out.CPURatio = baselineJSON(r, r.Baseline)
	out.Routed, out.RoutedRatio, out.RoutedCPU = baselineJSON(r, r.Routed)
	out.HTTPFloor, out.HTTPRatio, out.HTTPCPU = baselineJSON(r, r.HTTPFloor)
	return out
}

// baselineJSON is a baseline phase for --output json with its ratios to
// the gateway phase (events/s, and CPU time when measured); nils for nil.
func baselineJSON(r BenchReport, p *PhaseReport) (*phaseJSON, *float64, *float64) {
	if p == nil {
		return nil, nil, nil
	}
	b := toPhaseJSON(*p, r.Config)
	ratio := r.ratioTo(p)
	var cpu *float64
	if cr := r.cpuRatioTo(p); cr > 0 {
		cpu = &cr
	}
	return &b, &ratio, cpu
}

// cmdBenchCleanup deletes the topics a bench run left on a shared broker;
// only names under "aepctl.bench." can be deleted.
func cmdBenchCleanup(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepbench", "cleanup", "cleanup --kafka-brokers B --prefix aepctl.bench.RUN.", stdout, stderr)
	brokers := fs.String("kafka-brokers", os.Getenv("KAFKA_BROKERS"), "Kafka brokers [$KAFKA_BROKERS]")
	prefix := fs.String("prefix", "", `delete every topic whose name starts with this; must start with "aepctl.bench." and name a run`)
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if *brokers == "" || !strings.HasPrefix(*prefix, "aepctl.bench.") || len(*prefix) <= len("aepctl.bench.") {
		return cli.UsageErr(fs, "--kafka-brokers and a --prefix under aepctl.bench.RUN are needed")
	}
	deleteTopicsPrefixed(cli.SplitList(*brokers), *prefix)
	return nil
}
