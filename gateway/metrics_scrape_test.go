package gateway_test

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// countingCollector counts its Collect calls, each of which takes a
// while, as the consumer-lag collector's Kafka round trips do.
type countingCollector struct {
	desc  *prometheus.Desc
	calls atomic.Int64
}

func (c *countingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c *countingCollector) Collect(ch chan<- prometheus.Metric) {
	c.calls.Add(1)
	time.Sleep(20 * time.Millisecond) // the cost being measured, not a wait for a condition
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1)
}

// scrape GETs url as Prometheus does (gzip) and reads the whole body; it
// reports the status, or 0 after reporting an error (safe off the test's
// goroutine).
func scrape(t testing.TB, cl *http.Client, url string) int {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := cl.Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	defer resp.Body.Close()
	body := io.Reader(resp.Body)
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Error(err)
			return 0
		}
		body = zr
	}
	if _, err := io.Copy(io.Discard, body); err != nil {
		t.Error(err)
		return 0
	}
	return resp.StatusCode
}

// Concurrent scrapes of /metrics share one collection within the cache
// TTL (issue 31: 32 scraping workers multiplied the gateway's collection
// work, the consumer-lag Kafka requests included), and the scrapes in
// flight are bounded: past the bound, 503 at once.
func TestMetricsScrapesShareOneCollection(t *testing.T) {
	reg := prometheus.NewRegistry()
	cc := &countingCollector{desc: prometheus.NewDesc("test_slow_collector", "A slow collector.", nil, nil)}
	reg.MustRegister(cc)
	st := gatewaytest.New(t, gatewaytest.Options{Config: func(c *gateway.Config) { c.Registry = reg }})
	srv := httptest.NewServer(st.Server.Handler())
	defer srv.Close()
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var wg sync.WaitGroup
	codes := make([]int, 32)
	for i := range 32 {
		wg.Add(1)
		go func() { defer wg.Done(); codes[i] = scrape(t, cl, srv.URL+"/metrics") }()
	}
	wg.Wait()
	ok, busy := 0, 0
	for _, c := range codes {
		switch c {
		case http.StatusOK:
			ok++
		case http.StatusServiceUnavailable:
			busy++
		default:
			t.Fatalf("scrape answered %d", c)
		}
	}
	t.Logf("32 concurrent scrapes: %d answered, %d refused 503; the collector ran %d times", ok, busy, cc.calls.Load())
	if n := cc.calls.Load(); n > 2 {
		t.Fatalf("32 concurrent scrapes ran the collector %d times, want at most 2 (one per cache TTL)", n)
	}
	if ok == 0 {
		t.Fatal("no scrape answered")
	}
	// Sequential scrapes within the TTL: no new collection.
	before := cc.calls.Load()
	for range 5 {
		if c := scrape(t, cl, srv.URL+"/metrics"); c != http.StatusOK {
			t.Fatalf("sequential scrape: %d", c)
		}
	}
	if n := cc.calls.Load() - before; n > 1 {
		t.Fatalf("5 sequential scrapes within the TTL ran the collector %d times", n)
	}
}

// BenchmarkMetricsScrape is one /metrics scrape (gzip, as Prometheus asks)
// of a gateway with the delivery engine's metrics and 20 tenants' live
// tails, whose consumer lag is read from Kafka (kfake) on collection:
// "direct" is the registry served by promhttp as before, "gateway" the
// gateway's handler. The parallel cases are 32 concurrent scrapers.
func BenchmarkMetricsScrape(b *testing.B) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	st := gatewaytest.New(b, gatewaytest.Options{Partitions: 4, Config: func(c *gateway.Config) { c.Registry = reg }})
	eng, err := engine.NewEngine(engine.Config{ClientOpts: []kgo.Opt{st.Seeds}, Topics: st.Provisioner, Registerer: reg, Logger: zerolog.New(io.Discard)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(eng.Close)
	f, err := filtering.ParseD([]byte(`{"types":"*"}`))
	if err != nil {
		b.Fatal(err)
	}
	for i := range 20 {
		tn, _ := tenant.Parse(fmt.Sprintf("t%02d", i))
		sub, err := eng.Subscribe(context.Background(), engine.Request{Tenant: tn, Filter: f})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(sub.Close)
	}
	direct := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer direct.Close()
	resp, err := http.Get(direct.URL)
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if n := strings.Count(string(body), "aep_delivery_tail_lag_records{"); n != 20 {
		b.Fatalf("%d tail lag series, want 20: the benchmark would not measure the lag collector", n)
	}
	gw := httptest.NewServer(st.Server.Handler())
	defer gw.Close()
	for _, c := range []struct{ name, url string }{{"direct", direct.URL}, {"gateway", gw.URL + "/metrics"}} {
		cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				scrape(b, cl, c.url)
			}
		})
		b.Run(c.name+"-32", func(b *testing.B) {
			b.SetParallelism(16) // 2 cores: 32 scrapers
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					scrape(b, cl, c.url)
				}
			})
		})
	}
}

// blockingCollector blocks in Collect until release is closed.
type blockingCollector struct {
	desc             *prometheus.Desc
	entered, release chan struct{}
	once             sync.Once
}

func (c *blockingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c *blockingCollector) Collect(ch chan<- prometheus.Metric) {
	c.once.Do(func() { close(c.entered) })
	<-c.release
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1)
}

// Past MaxMetricsScrapes in flight a scrape gets 503 at once, without
// waiting for the one in progress.
func TestMetricsScrapesInFlightBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	bc := &blockingCollector{desc: prometheus.NewDesc("test_blocking_collector", "Blocks.", nil, nil), entered: make(chan struct{}), release: make(chan struct{})}
	reg.MustRegister(bc)
	st := gatewaytest.New(t, gatewaytest.Options{Config: func(c *gateway.Config) { c.Registry, c.MaxMetricsScrapes = reg, 1 }})
	srv := httptest.NewServer(st.Server.Handler())
	defer srv.Close()
	first := make(chan int, 1)
	go func() { first <- scrape(t, http.DefaultClient, srv.URL+"/metrics") }()
	<-bc.entered
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	close(bc.release)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a scrape past the bound: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if st := <-first; st != http.StatusOK {
		t.Fatalf("the scrape in flight: %d", st)
	}
}
