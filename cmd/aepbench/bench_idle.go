package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/aep-gateway/aep-gateway/internal/aepclient"
)

// IdleConfig configures one idle-connection measurement.
type IdleConfig struct {
	Transport   string
	Connections int
	Settle      time.Duration // wait before each RSS reading
	Storm       time.Duration // how long RSS is sampled after the mass close
	Dial        int
	Progress    func(string, ...any)
}

// IdleResult is one peer and transport. RSS figures are bytes of the
// server process.
type IdleResult struct {
	Peer        string `json:"peer"`
	Transport   string `json:"transport"`
	Connections int    `json:"connections"`
	RSSBefore   int64  `json:"rss_before"`
	RSSOpen     int64  `json:"rss_open"`
	PerConn     int64  `json:"rss_per_connection"`
	// StormPeak is the highest RSS sampled (every 10ms) after every
	// connection was closed at once; StormAfter the last sample.
	StormPeak  int64 `json:"storm_peak"`
	StormAfter int64 `json:"storm_after"`
}

// StormSpike is the peak's rise over the RSS with every connection open,
// as a fraction (0.1 = 10%).
func (r IdleResult) StormSpike() float64 {
	if r.RSSOpen == 0 {
		return 0
	}
	return float64(r.StormPeak-r.RSSOpen) / float64(r.RSSOpen)
}

// runIdle opens cfg.Connections idle subscribers, reads the server's RSS,
// then closes them all at once and samples RSS for cfg.Storm.
func runIdle(ctx context.Context, name string, p peer, cfg IdleConfig) (IdleResult, error) {
	res := IdleResult{Peer: name, Transport: cfg.Transport, Connections: cfg.Connections}
	srv := p.Server()
	if srv.pid == 0 {
		return res, fmt.Errorf("%s: the idle bench needs the server's pid", name)
	}
	if err := wait(ctx, cfg.Settle); err != nil {
		return res, err
	}
	var err error
	if res.RSSBefore, err = srv.rss(); err != nil {
		return res, err
	}
	var dc deliveryCounter
	subs, wg, ended, err := openSubscribers(ctx, p, FanoutConfig{Transport: cfg.Transport, Subscribers: cfg.Connections, Dial: cfg.Dial}, &dc)
	closeAll := sync.OnceFunc(func() {
		for _, s := range subs {
			s.Close()
		}
		wg.Wait()
	})
	defer closeAll()
	if err != nil {
		return res, err
	}
	cfg.Progress("%s %s: %d connections open; settling %v", name, cfg.Transport, len(subs), cfg.Settle)
	if err := wait(ctx, cfg.Settle); err != nil {
		return res, err
	}
	if n := ended.Load(); n > 0 {
		return res, fmt.Errorf("%s %s: the server closed %d idle connections", name, cfg.Transport, n)
	}
	if res.RSSOpen, err = srv.rss(); err != nil {
		return res, err
	}
	res.PerConn = (res.RSSOpen - res.RSSBefore) / int64(cfg.Connections)
	cfg.Progress("%s %s: RSS %d MiB → %d MiB, %d B per connection; closing all at once", name, cfg.Transport,
		res.RSSBefore>>20, res.RSSOpen>>20, res.PerConn)
	peak := res.RSSOpen
	go closeAll() // joined by the deferred closeAll (sync.OnceFunc waits)
	for end := time.Now().Add(cfg.Storm); time.Now().Before(end); {
		if r, err := srv.rss(); err == nil {
			peak = max(peak, r)
			res.StormAfter = r
		}
		if err := wait(ctx, 10*time.Millisecond); err != nil {
			return res, err
		}
	}
	res.StormPeak = peak
	return res, nil
}

// wait is sleepCtx as an error: ctx's when it ended first.
func wait(ctx context.Context, d time.Duration) error {
	if !aepclient.SleepCtx(ctx, d) {
		return ctx.Err()
	}
	return nil
}

// IdleReport is every run of one command.
type IdleReport struct {
	LoadAvg string       `json:"load_average"`
	Runs    []IdleResult `json:"runs"`
	// Ratios are gateway/Centrifugo RSS per connection, per transport.
	Ratios map[string]float64 `json:"ratios_gateway_centrifugo,omitempty"`
}

func (r *IdleReport) ratios() {
	for _, g := range r.Runs {
		for _, c := range r.Runs {
			if g.Peer == "gateway" && c.Peer == "centrifugo" && g.Transport == c.Transport && c.PerConn > 0 {
				if r.Ratios == nil {
					r.Ratios = map[string]float64{}
				}
				r.Ratios[g.Transport] = float64(g.PerConn) / float64(c.PerConn)
			}
		}
	}
}

func printIdle(w io.Writer, r IdleReport) {
	fmt.Fprintf(w, "bench idle: load average %s\n", r.LoadAvg)
	fmt.Fprintf(w, "%-11s %-4s %6s %10s %10s %10s %10s %7s\n", "peer", "tr", "conns", "rss before", "rss open", "per conn", "storm peak", "spike")
	for _, x := range r.Runs {
		fmt.Fprintf(w, "%-11s %-4s %6d %9dM %9dM %9.1fK %9dM %6.1f%%\n", x.Peer, x.Transport, x.Connections,
			x.RSSBefore>>20, x.RSSOpen>>20, float64(x.PerConn)/1024, x.StormPeak>>20, 100*x.StormSpike())
	}
	for _, tr := range []string{transportSSE, transportWS} {
		if v, ok := r.Ratios[tr]; ok {
			fmt.Fprintf(w, "ratio gateway/centrifugo RSS per idle connection, %s: %.2f\n", tr, v)
		}
	}
}
