package integration

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// victimIngest ingests one event from cl and returns its latency.
func victimIngest(tb testing.TB, cl *http.Client, url string, i int) time.Duration {
	req, _ := http.NewRequest(http.MethodPost, url+"/aep/events", strings.NewReader(dEvent(i, "victim")))
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := cl.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		tb.Fatalf("victim ingest: %d", resp.StatusCode)
	}
	return time.Since(start)
}

// latencies ingests n events one after the other and returns their
// sorted latencies.
func latencies(tb testing.TB, cl *http.Client, url string, n int) []time.Duration {
	out := make([]time.Duration, 0, n)
	for i := range n {
		out = append(out, victimIngest(tb, cl, url, i))
	}
	slices.Sort(out)
	return out
}

func pct(d []time.Duration, p float64) time.Duration { return d[int(float64(len(d)-1)*p)] }

// BenchmarkHostileMetricsScrapers is a victim's ingest latency while 32
// workers scrape /metrics without pause (issue 31: p50 from ~7 ms to
// 47.5 ms), against its unloaded latency measured first in the same run:
// it reports loaded p50/p99 and their ratios to the unloaded ones. The
// baseline binary: AEP_GATEWAY_BIN. Run with -benchtime 300x.
func BenchmarkHostileMetricsScrapers(b *testing.B) {
	g := startGatewayUnder(b, nil, "--data-dir", b.TempDir(), "--embedded-kafka-listen", "127.0.0.1:0")
	// Live streams, so the lag collector has tails to read.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 8 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/aep/events?types=task.*", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("stream: %v %v", resp, err)
		}
		defer resp.Body.Close()
	}
	victim := clientFrom("127.0.0.2")
	latencies(b, victim, g.URL, 20) // warm up
	idle := latencies(b, victim, g.URL, 200)

	var wg sync.WaitGroup
	scrapes := make([]int, 32)
	scraper := clientFrom("127.0.0.3")
	scraper.Transport.(*http.Transport).MaxIdleConnsPerHost = 32
	sctx, stop := context.WithCancel(ctx)
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sctx.Err() == nil {
				req, _ := http.NewRequestWithContext(sctx, http.MethodGet, g.URL+"/metrics", nil)
				req.Header.Set("Accept-Encoding", "gzip")
				resp, err := scraper.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				scrapes[w]++
			}
		}()
	}
	var loaded []time.Duration
	i := 0
	for b.Loop() {
		loaded = append(loaded, victimIngest(b, victim, g.URL, i))
		i++
	}
	stop()
	wg.Wait()
	slices.Sort(loaded)
	total := 0
	for _, n := range scrapes {
		total += n
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(pct(loaded, 0.5)), "p50-ms")
	b.ReportMetric(ms(pct(loaded, 0.99)), "p99-ms")
	b.ReportMetric(ms(pct(loaded, 0.5))/ms(pct(idle, 0.5)), "p50-x-unloaded")
	b.ReportMetric(ms(pct(loaded, 0.99))/ms(pct(idle, 0.99)), "p99-x-unloaded")
	b.Logf("victim ingest unloaded: p50 %s p99 %s; with 32 scrapers (%d scrapes): p50 %s p99 %s",
		pct(idle, 0.5), pct(idle, 0.99), total, pct(loaded, 0.5), pct(loaded, 0.99))
}
