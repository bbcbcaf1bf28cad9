package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/internal/eventgen"
)

// FanoutConfig configures one fan-out measurement of one peer: one
// publisher, Subscribers live subscribers over Transport.
type FanoutConfig struct {
	Transport   string        // transportSSE or transportWS
	Dialect     aep.Dialect   // of the published events; DialectUnknown means R
	Subscribers int           // at least 1
	Duration    time.Duration // the measured window
	Warmup      time.Duration // publishing before the window opens
	Batch       int           // events per publish request
	// Window bounds the events in flight: the publisher waits while
	// published − the slowest subscriber's deliveries exceeds it, so the run
	// is saturated (the server is the bottleneck) without overflowing the
	// servers' per-connection queues (which would drop or disconnect).
	Window     int
	Publishers int // publish requests in flight; zero means 1
	Dial       int // subscribers opened at once
	// BrokerPID, when not zero, is the Kafka broker's process on this
	// machine: its CPU over the window is reported beside the server's.
	BrokerPID int
	// Broker says where the gateway's broker runs, for the report: "kafka",
	// "embedded" (inside the gateway process, so its CPU is the gateway's)
	// or "" (not known: a --url gateway without --broker-pid; Centrifugo).
	Broker   string
	Progress func(format string, args ...any)
}

// FanoutResult is one peer's figures. CPU is the server process's
// user+system time over the window (0 when not measured).
type FanoutResult struct {
	Peer        string        `json:"peer"`
	Transport   string        `json:"transport"`
	Dialect     string        `json:"dialect"`
	Subscribers int           `json:"subscribers"`
	Window      time.Duration `json:"window_ns"`
	Published   int64         `json:"published"`  // events, whole run
	Deliveries  int64         `json:"deliveries"` // in the window
	CPU         time.Duration `json:"cpu_ns"`
	Missing     int64         `json:"missing"` // published×subscribers − delivered, after a drain
	Ended       int64         `json:"ended_subscribers"`
	Retries     int64         `json:"publish_retries,omitempty"` // requests sent again after no answer
	// ClientCPU is the bench process's own CPU over the window (publisher
	// and subscribers): when it nears the machine's cores, the clients, not
	// the server, bound the wall-clock rate.
	ClientCPU time.Duration `json:"client_cpu_ns"`
	// Batch and Publishers are the publishing shape: events per publish
	// request and requests in flight.
	Batch      int `json:"batch"`
	Publishers int `json:"publishers"`
	// Broker is FanoutConfig.Broker; BrokerCPU the broker process's CPU
	// over the window (zero when embedded, unknown or for Centrifugo,
	// which has no broker).
	Broker    string        `json:"broker,omitempty"`
	BrokerCPU time.Duration `json:"broker_cpu_ns,omitempty"`
}

// retrier is a peer that resends publish requests that got no answer.
type retrier interface{ PublishRetries() int64 }

// PerSec is deliveries per wall-clock second of the window.
func (r FanoutResult) PerSec() float64 { return perSec(r.Deliveries, r.Window) }

// PerCPUSec is deliveries per CPU-second of the server (0: not measured).
func (r FanoutResult) PerCPUSec() float64 { return perSec(r.Deliveries, r.CPU) }

// SystemPerCPUSec is deliveries per CPU-second of the whole system: the
// server and its broker. With the embedded broker, and for Centrifugo
// (no broker), it is PerCPUSec.
func (r FanoutResult) SystemPerCPUSec() float64 { return perSec(r.Deliveries, r.CPU+r.BrokerCPU) }

func perSec(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// runFanout opens the subscribers, publishes for Warmup+Duration and
// measures the window, then drains and closes everything it opened.
func runFanout(ctx context.Context, name string, p peer, cfg FanoutConfig) (res FanoutResult, err error) {
	res = FanoutResult{Peer: name, Transport: cfg.Transport, Subscribers: cfg.Subscribers, Dialect: "R",
		Batch: cfg.Batch, Publishers: max(cfg.Publishers, 1), Broker: cfg.Broker}
	if cfg.Dialect == aep.DialectD {
		res.Dialect = "D"
	}
	dc := deliveryCounter{mark: markOf(cfg.Dialect)}
	if r, ok := p.(retrier); ok {
		before := r.PublishRetries()
		defer func() { res.Retries = r.PublishRetries() - before }()
	}
	subs, wg, ended, err := openSubscribers(ctx, p, cfg, &dc)
	defer func() {
		for _, s := range subs {
			s.Close()
		}
		wg.Wait()
	}()
	if err != nil {
		return res, err
	}
	cfg.Progress("%s %s: %d subscribers open; publishing (warm-up %v, window %v)", name, cfg.Transport, len(subs), cfg.Warmup, cfg.Duration)
	pub := &fanoutPublisher{p: p, dialect: cfg.Dialect, batch: cfg.Batch, window: int64(cfg.Window), dc: &dc}
	perr := make(chan error, 1)
	go func() { perr <- pub.run(ctx, max(cfg.Publishers, 1)) }() // joined below through perr
	m, err := measureWindow(ctx, p.Server(), &dc, cfg, name, perr)
	pub.stop.Store(true)
	if e := <-perr; err == nil && e != nil {
		err = e
	}
	if err != nil {
		return res, err
	}
	res.Window, res.Deliveries, res.CPU, res.ClientCPU, res.BrokerCPU = m.wall, m.deliveries, m.cpu, m.clientCPU, m.brokerCPU
	res.Published = pub.published.Load()
	res.Missing = drain(ctx, &dc, res.Published*int64(cfg.Subscribers))
	res.Ended = ended.Load()
	return res, nil
}

// openSubscribers opens cfg.Subscribers subscribers, cfg.Dial at a time,
// and starts each one's reader; the caller closes them and waits on wg.
// ended counts readers that returned before being closed.
func openSubscribers(ctx context.Context, p peer, cfg FanoutConfig, dc *deliveryCounter) ([]subscriber, *sync.WaitGroup, *atomic.Int64, error) {
	var (
		mu    sync.Mutex
		subs  []subscriber
		first error
		wg    sync.WaitGroup
		ended atomic.Int64
		open  sync.WaitGroup
		done  atomic.Bool
	)
	sem := make(chan struct{}, max(cfg.Dial, 1))
	for i := 0; i < cfg.Subscribers && ctx.Err() == nil; i++ {
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			break
		}
		sem <- struct{}{}
		open.Add(1)
		go func() { // joined through open
			defer open.Done()
			defer func() { <-sem }()
			s, err := p.Subscribe(ctx, cfg.Transport)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("subscriber %d: %w", i, err)
				}
				return
			}
			subs = append(subs, s)
			count := dc.counter()
			wg.Add(1)
			go func() { // joined by the caller through wg, after Close
				defer wg.Done()
				s.Run(count)
				if !done.Load() {
					ended.Add(1)
				}
			}()
		}()
	}
	open.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return subs, &wg, &ended, first
}

// fanoutPublisher publishes batches as fast as the window allows, from
// several goroutines. Setting stop ends it between requests, so every
// request sent is counted in published.
type fanoutPublisher struct {
	p         peer
	dialect   aep.Dialect
	batch     int
	window    int64
	dc        *deliveryCounter
	published atomic.Int64
	inflight  atomic.Int64 // events sent, not yet answered
	stop      atomic.Bool
}

// run starts n publishing goroutines and waits for them; the first error
// stops them all.
func (f *fanoutPublisher) run(ctx context.Context, n int) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for w := range n {
		wg.Add(1)
		go func() { // joined below
			defer wg.Done()
			if errs[w] = f.loop(ctx, uint64(w+1)); errs[w] != nil {
				f.stop.Store(true)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (f *fanoutPublisher) loop(ctx context.Context, seed uint64) error {
	g := eventgen.NewGenerator(eventgen.GenOptions{Dialect: f.dialect, Sessions: 16, Seed: seed})
	events := make([][]byte, f.batch)
	for !f.stop.Load() && ctx.Err() == nil {
		if f.published.Load()+f.inflight.Load()-f.dc.slowest() > f.window {
			time.Sleep(200 * time.Microsecond)
			continue
		}
		for i := range events {
			events[i], _ = g.Next(events[i][:0])
		}
		f.inflight.Add(int64(len(events)))
		err := f.p.Publish(context.WithoutCancel(ctx), events)
		f.inflight.Add(-int64(len(events)))
		if err != nil {
			return err
		}
		f.published.Add(int64(len(events)))
	}
	return ctx.Err()
}

type windowFigures struct {
	wall       time.Duration
	deliveries int64
	cpu        time.Duration
	clientCPU  time.Duration
	brokerCPU  time.Duration // of cfg.BrokerPID; zero without
}

// measureWindow waits out the warm-up, then reads the server's CPU and the
// delivery count at both ends of the window, printing deliveries/s every
// second. A publisher error (perr) ends it early.
func measureWindow(ctx context.Context, srv *server, dc *deliveryCounter, cfg FanoutConfig, name string, perr chan error) (windowFigures, error) {
	wait := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-perr:
			perr <- err // for the caller
			if err == nil {
				err = errors.New("the publisher stopped")
			}
			return err
		case <-time.After(d):
			return nil
		}
	}
	if err := wait(cfg.Warmup); err != nil {
		return windowFigures{}, err
	}
	cpu0, err := srv.cpu()
	if err != nil {
		return windowFigures{}, err
	}
	self0, _ := procCPU(os.Getpid())
	broker0, err := brokerCPU(cfg.BrokerPID)
	if err != nil {
		return windowFigures{}, err
	}
	t0, n0 := time.Now(), dc.n.Load()
	last, lastN := t0, n0
	for end := t0.Add(cfg.Duration); time.Now().Before(end); {
		if err := wait(min(time.Second, time.Until(end))); err != nil {
			return windowFigures{}, err
		}
		now, n := time.Now(), dc.n.Load()
		cfg.Progress("%s %s ×%d: %.0f deliveries/s", name, cfg.Transport, cfg.Subscribers, perSec(n-lastN, now.Sub(last)))
		last, lastN = now, n
	}
	cpu1, err := srv.cpu()
	if err != nil {
		return windowFigures{}, err
	}
	self1, _ := procCPU(os.Getpid())
	broker1, err := brokerCPU(cfg.BrokerPID)
	if err != nil {
		return windowFigures{}, err
	}
	return windowFigures{wall: time.Since(t0), deliveries: dc.n.Load() - n0, cpu: cpu1 - cpu0, clientCPU: self1 - self0,
		brokerCPU: broker1 - broker0}, nil
}

// brokerCPU is the broker process's CPU time, zero without one (pid 0).
func brokerCPU(pid int) (time.Duration, error) {
	if pid <= 0 {
		return 0, nil
	}
	d, err := procCPU(pid)
	if err != nil {
		return 0, fmt.Errorf("the broker (--broker-pid): %w", err)
	}
	return d, nil
}

// drain waits for the deliveries to reach want while they progress (the
// backlog of a window × subscribers can take a while), at most 2 minutes,
// and returns what is still missing after 3s without progress.
func drain(ctx context.Context, dc *deliveryCounter, want int64) int64 {
	deadline := time.Now().Add(2 * time.Minute)
	last, lastAt := dc.n.Load(), time.Now()
	for n := last; n < want && time.Now().Before(deadline) && ctx.Err() == nil; n = dc.n.Load() {
		if n != last {
			last, lastAt = n, time.Now()
		} else if time.Since(lastAt) > 3*time.Second {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return want - dc.n.Load()
}

// FanoutReport is every run of one command.
type FanoutReport struct {
	LoadAvg string         `json:"load_average"`
	Runs    []FanoutResult `json:"runs"`
	// Ratios are gateway/Centrifugo deliveries per CPU-second, per
	// transport and subscriber count ("sse/100"); SystemRatios the same
	// with the gateway's broker's CPU added to the gateway's (Centrifugo
	// has no broker). With the embedded broker both are the same.
	Ratios       map[string]float64 `json:"ratios_gateway_centrifugo,omitempty"`
	SystemRatios map[string]float64 `json:"ratios_system_centrifugo,omitempty"`
	Errors       []string           `json:"errors,omitempty"` // runs that failed
}

func (r *FanoutReport) ratios() {
	by := map[string]FanoutResult{}
	for _, x := range r.Runs {
		by[fmt.Sprintf("%s/%s/%d", x.Peer, x.Transport, x.Subscribers)] = x
	}
	for _, x := range r.Runs {
		if x.Peer != "gateway" {
			continue
		}
		c, ok := by[fmt.Sprintf("centrifugo/%s/%d", x.Transport, x.Subscribers)]
		if ok && c.PerCPUSec() > 0 && x.PerCPUSec() > 0 {
			if r.Ratios == nil {
				r.Ratios, r.SystemRatios = map[string]float64{}, map[string]float64{}
			}
			key := fmt.Sprintf("%s/%d", x.Transport, x.Subscribers)
			r.Ratios[key] = x.PerCPUSec() / c.PerCPUSec()
			r.SystemRatios[key] = x.SystemPerCPUSec() / c.SystemPerCPUSec()
		}
	}
}

func printFanout(w io.Writer, r FanoutReport) {
	dialect := "R"
	if len(r.Runs) > 0 {
		dialect = r.Runs[0].Dialect
	}
	fmt.Fprintf(w, "bench fanout: dialect %s, load average %s\n", dialect, r.LoadAvg)
	if len(r.Runs) > 0 {
		fmt.Fprintf(w, "publishing: batch %d (events a request), %d requests in flight; gateway's broker: %s\n", r.Runs[0].Batch, r.Runs[0].Publishers, brokerText(r.Runs[0].Broker))
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "failed: %s\n", e)
	}
	fmt.Fprintf(w, "%-11s %-4s %6s %12s %10s %16s %10s %16s %8s %6s %10s\n", "peer", "tr", "subs", "deliveries/s", "cpu", "deliveries/cpu-s",
		"broker cpu", "system/cpu-s", "missing", "ended", "bench cpu")
	for _, x := range r.Runs {
		fmt.Fprintf(w, "%-11s %-4s %6d %12.0f %10v %16.0f %10v %16.0f %8d %6d %10v\n", x.Peer, x.Transport, x.Subscribers, x.PerSec(),
			x.CPU.Round(10*time.Millisecond), x.PerCPUSec(), x.BrokerCPU.Round(10*time.Millisecond), x.SystemPerCPUSec(),
			x.Missing, x.Ended, x.ClientCPU.Round(10*time.Millisecond))
	}
	for _, tr := range []string{transportSSE, transportWS} {
		for _, x := range r.Runs {
			if x.Peer == "gateway" && x.Transport == tr {
				if v, ok := r.Ratios[fmt.Sprintf("%s/%d", tr, x.Subscribers)]; ok {
					fmt.Fprintf(w, "ratio gateway/centrifugo deliveries per CPU-second, %s ×%d: %.2f (whole system, with the broker: %.2f)\n",
						tr, x.Subscribers, v, r.SystemRatios[fmt.Sprintf("%s/%d", tr, x.Subscribers)])
				}
			}
		}
	}
}

// brokerText says where the gateway's broker ran, for the text report.
func brokerText(b string) string {
	switch b {
	case "kafka":
		return "Kafka (its CPU from --broker-pid)"
	case "embedded":
		return "embedded, inside the gateway process (its CPU is in the gateway's)"
	}
	return "not measured"
}
