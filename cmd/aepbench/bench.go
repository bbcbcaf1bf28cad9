package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/internal/aepclient"
	"github.com/aep-gateway/aep-gateway/internal/cli"
	"github.com/aep-gateway/aep-gateway/internal/eventgen"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// Bench bounds.
const (
	maxBenchDuration  = 10 * time.Minute
	defaultMaxEvents  = 10_000_000 // --max without --events
	maxBenchBatch     = 1000       // the gateway's default batch limit
	maxBenchWorkers   = 256
	defaultReqTimeout = 30 * time.Second
)

// BenchConfig configures RunBench. Zero values mean the defaults.
type BenchConfig struct {
	Dialect aep.Dialect // DialectUnknown means R
	URL     string      // gateway base URL; zero means http://127.0.0.1:8080
	Token   string
	// Rate is the target in events/s. Zero means as fast as the workers go
	// (--max).
	Rate float64
	// Duration bounds each phase; zero means 10s, at most 10m.
	Duration time.Duration
	// MaxEvents bounds the events of each phase. Zero means Rate·Duration
	// with a Rate, else 10,000,000.
	MaxEvents int
	// Concurrency is the number of requests in flight; zero means 4. Over
	// WebSocket it is the number of connections, each with one batch in
	// flight.
	Concurrency int
	// WebSocket publishes each event as one message on a held WebSocket
	// connection (R /socket, D /aep) instead of POSTing batches (wsSender).
	WebSocket bool
	// Batch is the events per request; zero means 100, at most 1000.
	Batch int
	// Sessions the events are spread over; zero means 100.
	Sessions int
	// Size pads events to about this many bytes; zero means no padding.
	Size int
	// AllowRemote permits a gateway or baseline broker that is not on
	// loopback.
	AllowRemote bool
	// RequestTimeout bounds one request; zero means 30s.
	RequestTimeout time.Duration
	// Seed seeds the events' ULIDs; zero means random. Both phases send the
	// same bytes.
	Seed uint64

	// BaselineBrokers, when set, adds a phase that produces the same events
	// straight to BaselineTopic with franz-go (acks=all, idempotent).
	BaselineBrokers []string
	// BaselineTopic; zero means "aepctl.bench.baseline". Created when missing.
	BaselineTopic string
	// BaselinePartitions of a created BaselineTopic; zero means 12, the
	// gateway's default for tenant topics.
	BaselinePartitions int
	// BaselineRouted adds a second baseline phase that produces the records
	// the gateway writes (session key, routing headers, the event bytes)
	// instead of bare values: what the record format itself costs Kafka
	// and a producer, the floor of any gateway writing it.
	BaselineRouted bool
	// BaselineHTTP adds a phase that sends the same requests to a server
	// that only reads them and answers 202 (aepbench http-sink, started
	// as a child process): what HTTP/1.1 itself costs here, before any
	// gateway work. Independent of BaselineBrokers.
	BaselineHTTP bool

	// GatewayPID and BrokerPID, when not zero, are processes on this
	// machine whose CPU time each phase reports beside aepctl's own
	// (/proc/<pid>/stat): the gateway, and the Kafka broker (none apart
	// from the gateway for its embedded broker).
	GatewayPID, BrokerPID int

	// Progress, when not nil, gets a line when a phase starts and ends and
	// one per ProgressEvery while it runs.
	Progress io.Writer `json:"-"`
	// ProgressEvery is the period of progress lines; zero means 1s.
	ProgressEvery time.Duration `json:"-"`
}

func (c BenchConfig) withDefaults() BenchConfig {
	if c.Dialect == aep.DialectUnknown {
		c.Dialect = aep.DialectR
	}
	if c.URL == "" {
		c.URL = cli.DefaultURL
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.MaxEvents <= 0 {
		if c.Rate > 0 {
			c.MaxEvents = int(math.Ceil(c.Rate * c.Duration.Seconds()))
		} else {
			c.MaxEvents = defaultMaxEvents
		}
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.Batch <= 0 {
		c.Batch = 100
	}
	if c.Sessions <= 0 {
		c.Sessions = 100
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = defaultReqTimeout
	}
	if c.BaselineTopic == "" {
		c.BaselineTopic = "aepctl.bench.baseline"
	}
	if c.BaselinePartitions <= 0 {
		c.BaselinePartitions = 12
	}
	for c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	return c
}

func (c BenchConfig) validate() error {
	switch {
	case c.Duration > maxBenchDuration:
		return fmt.Errorf("duration %v is over the bound of %v", c.Duration, maxBenchDuration)
	case c.Batch > maxBenchBatch:
		return fmt.Errorf("batch %d is over the gateway's batch limit of %d", c.Batch, maxBenchBatch)
	case c.Concurrency > maxBenchWorkers:
		return fmt.Errorf("concurrency %d is over the bound of %d", c.Concurrency, maxBenchWorkers)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("rate %v: want a positive number", c.Rate)
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("url %q: want http(s)://host:port", c.URL)
	}
	if c.AllowRemote {
		return nil
	}
	if err := checkLoopback(u.Hostname()); err != nil {
		return fmt.Errorf("url %q: %w", c.URL, err)
	}
	for _, b := range c.BaselineBrokers {
		host, _, err := net.SplitHostPort(b)
		if err != nil {
			return fmt.Errorf("baseline broker %q: %w", b, err)
		}
		if err := checkLoopback(host); err != nil {
			return fmt.Errorf("baseline broker %q: %w", b, err)
		}
	}
	return nil
}

// errRemote is wrapped when a target is not on loopback.
var errRemote = errors.New("not a loopback address (pass --allow-remote to load a remote target)")

// checkLoopback accepts a loopback IP, "localhost", or a name that resolves
// only to loopback addresses.
func checkLoopback(host string) error {
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsLoopback() {
			return nil
		}
		return errRemote
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return fmt.Errorf("resolve %q: %w", host, err)
	}
	for _, ip := range ips {
		if !ip.IP.IsLoopback() {
			return errRemote
		}
	}
	if len(ips) == 0 {
		return errRemote
	}
	return nil
}

// PhaseReport is what one phase (the gateway, or the Kafka baseline)
// measured.
type PhaseReport struct {
	Name     string // "gateway" or "kafka"
	Target   string // URL or brokers and topic
	Elapsed  time.Duration
	Requests int // requests (gateway) or produce calls (kafka) completed
	Events   int // events sent
	Accepted int
	Rejected int // refused by the gateway as invalid
	Failed   int // not taken for another reason (5xx, 429, connection, Kafka error)
	// ByStatus counts requests by outcome: the HTTP status ("202", "503"),
	// "error" for no answer, "ok" for a Kafka produce call that succeeded,
	// or the Kafka error.
	ByStatus map[string]int
	// Behind is true when the dispatcher could not keep the target rate:
	// the last batch left more than a second after its scheduled time.
	Behind  bool
	Latency LatencySummary
	// FromSchedule is, with a Rate, the time from each batch's due time to
	// its answer: Latency plus any wait for a free worker, so a saturated
	// target shows here (the correction for coordinated omission). Zero
	// with --max, where there is no schedule.
	FromSchedule LatencySummary
	// CPU is the CPU time the measured processes used during the phase.
	CPU PhaseCPU
	// Server names the process in CPU.Gateway when it is not the gateway:
	// "sink" for the http-floor phase; empty means the gateway.
	Server string
}

// PhaseCPU is the CPU time of the processes of a run during one phase. On a
// shared machine throughput follows the load of others; CPU time per event
// does much less, and it is what bounds throughput when the cores are the
// limit (the gateway, its broker and the client sharing them).
type PhaseCPU struct {
	Client  time.Duration // aepctl itself: generating and sending
	Gateway time.Duration // BenchConfig.GatewayPID; zero without
	Broker  time.Duration // BenchConfig.BrokerPID; zero without
}

// Total is the CPU time of every measured process.
func (c PhaseCPU) Total() time.Duration { return c.Client + c.Gateway + c.Broker }

// PerEvent is d over the phase's accepted events, in microseconds, or 0.
func (p PhaseReport) PerEvent(d time.Duration) float64 {
	if p.Accepted == 0 {
		return 0
	}
	return float64(d) / float64(time.Microsecond) / float64(p.Accepted)
}

// cpuSample reads the CPU time of aepctl and of the configured processes;
// a process that cannot be read counts zero.
func cpuSample(cfg BenchConfig) PhaseCPU {
	var c PhaseCPU
	c.Client, _ = procCPU(os.Getpid())
	if cfg.GatewayPID > 0 {
		c.Gateway, _ = procCPU(cfg.GatewayPID)
	}
	if cfg.BrokerPID > 0 {
		c.Broker, _ = procCPU(cfg.BrokerPID)
	}
	return c
}

func (c PhaseCPU) sub(o PhaseCPU) PhaseCPU {
	return PhaseCPU{Client: c.Client - o.Client, Gateway: c.Gateway - o.Gateway, Broker: c.Broker - o.Broker}
}

// AcceptedPerSec is the phase's accepted events over its elapsed time.
func (p PhaseReport) AcceptedPerSec() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Accepted) / p.Elapsed.Seconds()
}

// BenchReport is the result of RunBench.
type BenchReport struct {
	Config   BenchConfig
	Gateway  PhaseReport
	Baseline *PhaseReport // nil without BaselineBrokers
	Routed   *PhaseReport // nil without BaselineRouted
	// HTTPFloor is the http-floor phase; nil without BaselineHTTP.
	HTTPFloor *PhaseReport
}

// Ratio is the gateway's accepted events/s over the baseline's, or 0.
func (r BenchReport) Ratio() float64 { return r.ratioTo(r.Baseline) }

// RoutedRatio is the gateway's accepted events/s over the routed
// baseline's, or 0.
func (r BenchReport) RoutedRatio() float64 { return r.ratioTo(r.Routed) }

// HTTPFloorRatio is the gateway's accepted events/s over the http-floor
// phase's, or 0.
func (r BenchReport) HTTPFloorRatio() float64 { return r.ratioTo(r.HTTPFloor) }

func (r BenchReport) ratioTo(p *PhaseReport) float64 {
	if p == nil || p.AcceptedPerSec() == 0 {
		return 0
	}
	return r.Gateway.AcceptedPerSec() / p.AcceptedPerSec()
}

// CPURatio is the baseline's CPU time per event over the gateway phase's,
// both summed over the measured processes, or 0: the throughput ratio the
// two paths would have on cores they had to themselves. Without GatewayPID
// it is 0 (the gateway phase's cost would be missing its main part).
func (r BenchReport) CPURatio() float64 { return r.cpuRatioTo(r.Baseline) }

// RoutedCPURatio is CPURatio against the routed baseline.
func (r BenchReport) RoutedCPURatio() float64 { return r.cpuRatioTo(r.Routed) }

// HTTPFloorCPURatio is CPURatio against the http-floor phase.
func (r BenchReport) HTTPFloorCPURatio() float64 { return r.cpuRatioTo(r.HTTPFloor) }

func (r BenchReport) cpuRatioTo(p *PhaseReport) float64 {
	if p == nil || r.Config.GatewayPID == 0 {
		return 0
	}
	g := r.Gateway.PerEvent(r.Gateway.CPU.Total())
	if g == 0 {
		return 0
	}
	return p.PerEvent(p.CPU.Total()) / g
}

// loadBatch is one request's worth of generated events.
type loadBatch struct {
	due   time.Time // with a Rate, when the schedule wanted it sent
	body  []byte    // NDJSON, each line ending in "\n"
	lines [][]byte  // the events, sub-slices of body without the "\n"
	keys  []string  // each event's session
	// hdrs are each event's routing headers, only for a routed phase.
	hdrs [][]kgo.RecordHeader
}

// outcome is what one send did.
type outcome struct {
	accepted, rejected, failed int
	status                     string
}

// batchSender sends one batch; it must be safe for concurrent use.
type batchSender interface {
	send(ctx context.Context, b *loadBatch) outcome
}

// RunBench runs the gateway phase and after it, as configured, the Kafka
// phases (bare, routed) and the http-floor phase, each bounded by Duration
// and MaxEvents, and reports them all.
// It returns when every goroutine it started has stopped. Cancelling ctx
// ends the run early; what was measured is still reported.
func RunBench(ctx context.Context, cfg BenchConfig) (BenchReport, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return BenchReport{}, err
	}
	rep := BenchReport{Config: cfg}
	var hs batchSender
	if cfg.WebSocket {
		ws := newWSSender(&aepclient.Client{BaseURL: cfg.URL, Token: cfg.Token}, cfg.Dialect, cfg.Concurrency)
		defer ws.close()
		hs = ws
	} else if cs, ok := newConnSender(cfg.URL, cfg.Token, cfg.Dialect, cfg.Concurrency); ok {
		defer cs.close()
		hs = cs
	} else {
		tr := &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency, MaxConnsPerHost: cfg.Concurrency, IdleConnTimeout: 30 * time.Second}
		defer tr.CloseIdleConnections()
		hs = httpSender{c: &aepclient.Client{BaseURL: cfg.URL, Token: cfg.Token, HTTP: &http.Client{Transport: tr}}, d: cfg.Dialect}
	}
	start := time.Now()
	target := cfg.URL + aepclient.Endpoint(cfg.Dialect)
	if cfg.WebSocket {
		target = cfg.URL + map[bool]string{true: "/aep", false: "/socket"}[cfg.Dialect == aep.DialectD] + " (WebSocket, one message an event)"
	}
	rep.Gateway = runPhase(ctx, cfg, start, "gateway", target, hs)
	if err := runBaselines(ctx, cfg, start, &rep); err != nil {
		return rep, err
	}
	if cfg.BaselineHTTP && ctx.Err() == nil {
		p, err := runHTTPFloor(ctx, cfg, start)
		if err != nil {
			return rep, fmt.Errorf("http floor: %w", err)
		}
		rep.HTTPFloor = &p
	}
	return rep, nil
}

// runBaselines runs the Kafka phases into rep: the bare baseline and, with
// BaselineRouted, the routed one.
func runBaselines(ctx context.Context, cfg BenchConfig, start time.Time, rep *BenchReport) error {
	if len(cfg.BaselineBrokers) == 0 || ctx.Err() != nil {
		return nil
	}
	ks, err := newKafkaSender(ctx, cfg)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	defer ks.close()
	b := runPhase(ctx, cfg, start, "kafka", fmt.Sprintf("%v topic %s", cfg.BaselineBrokers, cfg.BaselineTopic), ks)
	rep.Baseline = &b
	if !cfg.BaselineRouted || ctx.Err() != nil {
		return nil
	}
	routed := runPhase(ctx, cfg, start, "kafka-routed",
		fmt.Sprintf("%v topic %s, the gateway's record format", cfg.BaselineBrokers, cfg.BaselineTopic), routedSender{ks})
	rep.Routed = &routed
	return nil
}

// runPhase drives one sender: a dispatcher generates batches on schedule
// into a channel of Concurrency slots, Concurrency workers send them. The
// events are the same in every phase (same seed and start time).
func runPhase(ctx context.Context, cfg BenchConfig, genStart time.Time, name, target string, s batchSender) PhaseReport {
	_, routed := s.(routedSender) // its batches need the routing headers
	jobs := make(chan *loadBatch, cfg.Concurrency)
	workers := make([]workerStats, cfg.Concurrency)
	var wg sync.WaitGroup
	var live atomic.Int64 // accepted so far, for progress lines
	start := time.Now()
	cpu0 := cpuSample(cfg)
	stopProgress := startProgress(cfg, name, target, start, &live)
	for i := range workers {
		wg.Go(func() { workers[i].run(ctx, cfg.RequestTimeout, s, jobs, &live) })
	}
	sent, behind := dispatch(ctx, cfg, genStart, start, jobs, routed)
	wg.Wait()
	cpu := cpuSample(cfg).sub(cpu0)
	stopProgress()
	rep := PhaseReport{Name: name, Target: target, Elapsed: time.Since(start), Events: sent, Behind: behind, ByStatus: map[string]int{}, CPU: cpu}
	var h, hs histogram
	for i := range workers {
		w := &workers[i]
		rep.Requests += w.requests
		rep.Accepted += w.accepted
		rep.Rejected += w.rejected
		rep.Failed += w.failed
		for k, v := range w.byStatus {
			rep.ByStatus[k] += v
		}
		h.merge(&w.hist)
		hs.merge(&w.fromSchedule)
	}
	rep.Latency = h.summary()
	rep.FromSchedule = hs.summary()
	return rep
}

// startProgress prints that the phase starts and, every ProgressEvery, the
// events accepted so far; the returned func stops the printer and waits for
// it. Without cfg.Progress it does nothing.
func startProgress(cfg BenchConfig, name, target string, start time.Time, live *atomic.Int64) (stop func()) {
	if cfg.Progress == nil {
		return func() {}
	}
	every := cfg.ProgressEvery
	if every <= 0 {
		every = time.Second
	}
	fmt.Fprintf(cfg.Progress, "bench: phase %s (%s) started, up to %v\n", name, target, cfg.Duration)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() { // owned by the phase: stop closes done and waits
		defer close(stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		last, lastAt := int64(0), start
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				n := live.Load()
				rate := float64(n-last) / now.Sub(lastAt).Seconds()
				fmt.Fprintf(cfg.Progress, "bench: %s %v: %d accepted, %.0f events/s\n", name, now.Sub(start).Round(time.Second), n, rate)
				last, lastAt = n, now
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		fmt.Fprintf(cfg.Progress, "bench: phase %s done in %v: %d accepted\n", name, time.Since(start).Round(time.Millisecond), live.Load())
	}
}

// dispatch generates batches and hands them to the workers until the
// phase's events, its duration or ctx runs out, then closes jobs. With a
// Rate a late dispatcher gets one more Duration to finish the schedule; a
// dispatcher waiting on busy workers stops at that bound too. With a
// Rate, batch k is due at start + k·Batch/Rate; a late batch is sent at once
// (open loop, no catch-up skipping). It returns the events handed over.
func dispatch(ctx context.Context, cfg BenchConfig, genStart, start time.Time, jobs chan<- *loadBatch, routed bool) (sent int, behind bool) {
	defer close(jobs)
	g := eventgen.NewGenerator(eventgen.GenOptions{Dialect: cfg.Dialect, Sessions: cfg.Sessions, Size: cfg.Size, Seed: cfg.Seed, Start: genStart})
	end := start.Add(cfg.Duration)
	hardEnd := end
	if cfg.Rate > 0 { // the schedule ends by end; allow a late dispatcher one more Duration
		hardEnd = end.Add(cfg.Duration)
	}
	// Waits end at hardEnd too: a dispatcher blocked on busy workers stops.
	ctx, cancel := context.WithDeadline(ctx, hardEnd)
	defer cancel()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for k := 0; sent < cfg.MaxEvents && ctx.Err() == nil; k++ {
		now := time.Now()
		var due time.Time
		if cfg.Rate > 0 {
			due = start.Add(time.Duration(float64(k*cfg.Batch) / cfg.Rate * float64(time.Second)))
			if !due.Before(end) {
				return sent, behind
			}
			if wait := due.Sub(now); wait > 0 {
				timer.Reset(wait)
				select {
				case <-ctx.Done():
					return sent, behind
				case <-timer.C:
				}
			} else if -wait > time.Second {
				behind = true
			}
		} else if !now.Before(end) {
			return sent, behind
		}
		b := makeBatch(g, min(cfg.Batch, cfg.MaxEvents-sent), routed)
		b.due = due
		select {
		case <-ctx.Done():
			return sent, behind
		case jobs <- b:
			sent += len(b.lines)
		}
	}
	return sent, behind
}

// authNone and viaHTTP are the publisher headers' values of a
// development-mode gateway, shared by every record as the gateway's are
// by a request's.
var authNone, viaHTTP = []byte("none"), []byte("http")

// makeBatch generates n events; with routed, each also gets the routing
// and publisher headers the gateway would give its record (their values
// share one buffer, as the gateway's do).
func makeBatch(g *eventgen.Generator, n int, routed bool) *loadBatch {
	b := &loadBatch{lines: make([][]byte, n), keys: make([]string, n)}
	offs := make([]int, n+1)
	var hdrs []kgo.RecordHeader
	var hvals []byte
	if routed {
		b.hdrs = make([][]kgo.RecordHeader, n)
	}
	for i := range n {
		var key string
		b.body, key = g.Next(b.body)
		if routed {
			a := g.Attrs()
			if hdrs == nil { // size both for n events like the first
				hdrs = make([]kgo.RecordHeader, 0, n*12) // 11 (R) or 8 (D) headers an event
				hvals = make([]byte, 0, n*(partitioning.HeaderValuesLen(&a)+8))
			}
			s := len(hdrs)
			hdrs, hvals = partitioning.AppendHeadersTo(hdrs, hvals, &a)
			// who published, as a development-mode gateway writes it
			hdrs = append(hdrs, kgo.RecordHeader{Key: partitioning.HeaderAuth, Value: authNone},
				kgo.RecordHeader{Key: partitioning.HeaderVia, Value: viaHTTP})
			b.hdrs[i] = hdrs[s:len(hdrs):len(hdrs)]
		}
		b.body = append(b.body, '\n')
		b.keys[i] = key
		offs[i+1] = len(b.body)
	}
	for i := range n {
		b.lines[i] = b.body[offs[i] : offs[i+1]-1]
	}
	return b
}

// workerStats are one worker's counts, read only after it was joined.
type workerStats struct {
	requests, accepted, rejected, failed int
	byStatus                             map[string]int
	hist, fromSchedule                   histogram
}

func (w *workerStats) run(ctx context.Context, timeout time.Duration, s batchSender, jobs <-chan *loadBatch, live *atomic.Int64) {
	w.byStatus = map[string]int{}
	for b := range jobs {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		t0 := time.Now()
		o := s.send(rctx, b)
		done := time.Now()
		w.hist.record(done.Sub(t0))
		if !b.due.IsZero() {
			w.fromSchedule.record(done.Sub(b.due))
		}
		cancel()
		w.requests++
		w.accepted += o.accepted
		live.Add(int64(o.accepted))
		w.rejected += o.rejected
		w.failed += o.failed
		w.byStatus[o.status]++
	}
}

// httpSender posts batches to the gateway, once each (no retries: a bench
// reports failures instead of hiding them).
type httpSender struct {
	c *aepclient.Client
	d aep.Dialect
}

func (h httpSender) send(ctx context.Context, b *loadBatch) outcome {
	n := len(b.lines)
	res, err := h.c.Send(ctx, h.d, b.body, n)
	if err != nil {
		return outcome{failed: n, status: "error"}
	}
	return httpOutcome(res, n)
}

// httpOutcome counts the gateway's answer to a batch of n events.
func httpOutcome(res aepclient.Result, n int) outcome {
	o := outcome{accepted: res.Accepted, status: strconv.Itoa(res.Status)}
	if res.Status >= 500 || res.Status == http.StatusTooManyRequests {
		o.failed = n - res.Accepted
	} else {
		o.rejected = res.Rejected
	}
	return o
}

// sortedStatuses returns m's keys in order, for printing.
func sortedStatuses(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
