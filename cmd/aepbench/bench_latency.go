package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/internal/eventgen"
)

// LatencyConfig configures one publish→deliver measurement at one rate.
type LatencyConfig struct {
	Rate        float64 // events/s, one event per request
	Duration    time.Duration
	Concurrency int // requests in flight at most
	Progress    func(string, ...any)
}

// LatencyResult is one phase: the gateway (POST /events → GET /stream) or
// direct (franz-go produce → franz-go consume on the same Kafka).
type LatencyResult struct {
	Path    string         `json:"path"` // "gateway" or "direct"
	Rate    float64        `json:"rate"`
	Sent    int64          `json:"sent"`
	Latency LatencySummary `json:"latency"`
	Lost    int64          `json:"lost"` // sent, never seen within 5s after the phase
	Rounds  int            `json:"rounds"`
	hist    histogram
}

// merge adds another slice of the same path and rate.
func (r LatencyResult) merge(o LatencyResult) LatencyResult {
	if r.Rounds == 0 {
		return o
	}
	r.hist.merge(&o.hist)
	r.Sent += o.Sent
	r.Lost += o.Lost
	r.Rounds += o.Rounds
	r.Latency = r.hist.summary()
	return r
}

// latencyProbe matches deliveries to send times by the generator's event
// number ("data":{"n":N in dialect R events).
// Warm-up events are numbered below warmupEvents and ignored.
type latencyProbe struct {
	sent []atomic.Int64 // unix ns of each event's send (by n − warmupEvents), 0 before
	any  atomic.Int64   // messages with an event number, warm-up included
	mu   sync.Mutex
	hist histogram
	seen atomic.Int64
}

func newLatencyProbe(n int) *latencyProbe { return &latencyProbe{sent: make([]atomic.Int64, n)} }

var nField = []byte(`"data":{"n":`)

// observe records the latency of the event in msg, if it is one of ours.
func (p *latencyProbe) observe(msg []byte) {
	now := time.Now().UnixNano()
	i := bytes.Index(msg, nField)
	if i < 0 {
		return
	}
	rest := msg[i+len(nField):]
	j := bytes.IndexAny(rest, ",}")
	if j < 0 {
		return
	}
	n, err := strconv.Atoi(string(rest[:j]))
	p.any.Add(1)
	n -= warmupEvents
	if err != nil || n < 0 || n >= len(p.sent) {
		return
	}
	t := p.sent[n].Load()
	if t == 0 {
		return
	}
	p.mu.Lock()
	p.hist.record(time.Duration(now - t))
	p.mu.Unlock()
	p.seen.Add(1)
}

// sendFunc sends one event; it must not retain ev.
type sendFunc func(ctx context.Context, ev []byte, key string) error

// runSchedule sends cfg.Rate events/s for cfg.Duration, open loop: event i
// leaves at start + i/rate through one of cfg.Concurrency workers, and its
// send time is stamped in the probe just before it goes.
func runSchedule(ctx context.Context, cfg LatencyConfig, name string, probe *latencyProbe, send sendFunc) (int64, error) {
	total := min(int(cfg.Rate*cfg.Duration.Seconds()), len(probe.sent))
	type job struct {
		n   int
		ev  []byte
		key string
	}
	jobs := make(chan job, cfg.Concurrency)
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	for range cfg.Concurrency {
		wg.Add(1)
		go func() { // joined below
			defer wg.Done()
			for j := range jobs {
				probe.sent[j.n].Store(time.Now().UnixNano())
				if err := send(ctx, j.ev, j.key); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	g := eventgen.NewGenerator(eventgen.GenOptions{Dialect: aep.DialectR, Sessions: 16})
	for range warmupEvents {
		g.Next(nil)
	}
	start, last := time.Now(), time.Now()
	sent := 0
	for ; sent < total && ctx.Err() == nil; sent++ {
		if d := time.Until(start.Add(time.Duration(float64(sent) / cfg.Rate * float64(time.Second)))); d > 0 {
			time.Sleep(d)
		}
		ev, key := g.Next(nil)
		jobs <- job{n: sent, ev: ev, key: key}
		if time.Since(last) >= time.Second {
			last = time.Now()
			cfg.Progress("%s at %.0f/s: sent %d, delivered %d", name, cfg.Rate, sent, probe.seen.Load())
		}
	}
	close(jobs)
	wg.Wait()
	if f := failed.Load(); f > 0 {
		return int64(sent), fmt.Errorf("%s: %d sends failed, first: %v", name, f, firstErr.Load())
	}
	return int64(sent), ctx.Err()
}

// warmupEvents is how many event numbers warmUp may use.
const warmupEvents = 100

// warmUp sends an event every 100ms until the subscriber sees one (the
// topic exists, the subscription is live), at most warmupEvents.
func warmUp(ctx context.Context, probe *latencyProbe, send sendFunc) error {
	g := eventgen.NewGenerator(eventgen.GenOptions{Dialect: aep.DialectR, Sessions: 16})
	for range warmupEvents {
		ev, key := g.Next(nil)
		if err := send(ctx, ev, key); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		for range 10 {
			if probe.any.Load() > 0 {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return errors.New("warm-up: no event came back within 10s")
}

// finish waits up to 5s for every sent event to be seen and summarises.
func (p *latencyProbe) finish(path string, rate float64, sent int64) LatencyResult {
	deadline := time.Now().Add(5 * time.Second)
	for p.seen.Load() < sent && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return LatencyResult{Path: path, Rate: rate, Sent: sent, Latency: p.hist.summary(), Lost: sent - p.seen.Load(), Rounds: 1, hist: p.hist}
}

// gatewayLatency publishes single events through POST /events and times
// their arrival on one GET /stream subscriber.
func gatewayLatency(ctx context.Context, g *gatewayPeer, cfg LatencyConfig) (LatencyResult, error) {
	probe := newLatencyProbe(int(cfg.Rate*cfg.Duration.Seconds()) + 1)
	sub, err := g.Subscribe(ctx, transportSSE)
	if err != nil {
		return LatencyResult{}, err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); sub.Run(probe.observe) }() // joined after Close
	defer func() { sub.Close(); wg.Wait() }()
	send := func(ctx context.Context, ev []byte, _ string) error { return g.Publish(ctx, [][]byte{ev}) }
	if err := warmUp(ctx, probe, send); err != nil {
		return LatencyResult{}, err
	}
	sent, err := runSchedule(ctx, cfg, "gateway", probe, send)
	if err != nil {
		return LatencyResult{}, err
	}
	return probe.finish("gateway", cfg.Rate, sent), nil
}

// directLatency produces the same events straight to a topic of brokers
// with the producer settings of the ingest baseline, and consumes them with
// a franz-go consumer of the same process.
func directLatency(ctx context.Context, brokers []string, topic string, cfg LatencyConfig) (LatencyResult, error) {
	probe := newLatencyProbe(int(cfg.Rate*cfg.Duration.Seconds()) + 1)
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)), kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.Lz4Compression(), kgo.NoCompression()))
	if err != nil {
		return LatencyResult{}, fmt.Errorf("kafka producer: %w", err)
	}
	defer prod.Close()
	cctx, ccancel := context.WithTimeout(ctx, 15*time.Second)
	resp, err := kadm.NewClient(prod).CreateTopic(cctx, 12, -1, nil, topic)
	ccancel()
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return LatencyResult{}, fmt.Errorf("create topic %s: %w", topic, err)
	}
	// Consume from the current ends, exactly: nothing published is missed.
	at, err := endOffsets(ctx, kadm.NewClient(prod), topic, 12)
	if err != nil {
		return LatencyResult{}, err
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.FetchMaxWait(time.Second),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: at}))
	if err != nil {
		return LatencyResult{}, fmt.Errorf("kafka consumer: %w", err)
	}
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // joined below
		defer wg.Done()
		for pctx.Err() == nil {
			cons.PollFetches(pctx).EachRecord(func(r *kgo.Record) { probe.observe(r.Value) })
		}
	}()
	defer func() { stop(); wg.Wait(); cons.Close() }()
	send := func(ctx context.Context, ev []byte, key string) error {
		return prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: ev}).FirstErr()
	}
	if err := warmUp(ctx, probe, send); err != nil {
		return LatencyResult{}, err
	}
	sent, err := runSchedule(ctx, cfg, "direct", probe, send)
	if err != nil {
		return LatencyResult{}, err
	}
	return probe.finish("direct", cfg.Rate, sent), nil
}

// endOffsets returns the end offset of each of the topic's parts
// partitions. A topic created a moment ago may not be known to every
// broker yet: its partitions then list with an error (or as partition -1,
// the whole topic unknown), so it asks again every 100ms, for up to 15s.
func endOffsets(ctx context.Context, adm *kadm.Client, topic string, parts int) (map[int32]kgo.Offset, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		ends, err := adm.ListEndOffsets(ctx, topic)
		at := map[int32]kgo.Offset{}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err == nil && o.Partition >= 0 {
				at[o.Partition] = kgo.NewOffset().At(o.Offset)
			} else if err == nil {
				err = o.Err
			}
		})
		if err == nil && len(at) == parts {
			return at, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("end offsets of %s: %d of %d partitions listed: %w", topic, len(at), parts, cmp.Or(err, ctx.Err()))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// LatencyReport is every phase of one command.
type LatencyReport struct {
	LoadAvg string          `json:"load_average"`
	Runs    []LatencyResult `json:"runs"`
}

// AddedP99 is the gateway's p99 minus direct's at rate, when both ran.
func (r LatencyReport) AddedP99(rate float64) (time.Duration, bool) {
	var g, d *LatencyResult
	for i := range r.Runs {
		if r.Runs[i].Rate == rate {
			if r.Runs[i].Path == "gateway" {
				g = &r.Runs[i]
			} else {
				d = &r.Runs[i]
			}
		}
	}
	if g == nil || d == nil {
		return 0, false
	}
	return g.Latency.P99 - d.Latency.P99, true
}

func printLatency(w io.Writer, r LatencyReport) {
	fmt.Fprintf(w, "bench latency: publish → deliver, load average %s\n", r.LoadAvg)
	fmt.Fprintf(w, "%-8s %7s %7s %10s %10s %10s %10s %5s\n", "path", "rate/s", "sent", "p50", "p90", "p99", "max", "lost")
	for _, x := range r.Runs {
		l := x.Latency
		fmt.Fprintf(w, "%-8s %7.0f %7d %10v %10v %10v %10v %5d\n", x.Path, x.Rate, x.Sent, rnd(l.P50), rnd(l.P90), rnd(l.P99), rnd(l.Max), x.Lost)
	}
	seen := map[float64]bool{}
	for _, x := range r.Runs {
		if seen[x.Rate] {
			continue
		}
		seen[x.Rate] = true
		if d, ok := r.AddedP99(x.Rate); ok {
			fmt.Fprintf(w, "added p99 over direct at %.0f/s: %v\n", x.Rate, rnd(d))
		}
	}
}
