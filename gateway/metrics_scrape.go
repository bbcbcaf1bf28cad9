package gateway

import (
	"bytes"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Defaults of the /metrics handler (Config.MetricsCacheTTL,
// Config.MaxMetricsScrapes).
const (
	DefaultMetricsCacheTTL   = time.Second
	DefaultMaxMetricsScrapes = 32
	// maxScrapeVariants bounds the cached renderings (one per Accept and
	// Accept-Encoding pair a scraper sends).
	maxScrapeVariants = 8
)

// scrapeCache serves a registry on /metrics at a bounded cost whatever the
// scrape rate: a scrape within ttl of the last rendering for the same
// Accept and Accept-Encoding headers gets those bytes again, so collection
// (the consumer-lag collector's Kafka requests, the process collector's
// /proc reads), encoding and compression run at most once per ttl and
// variant; concurrent scrapes of a stale variant wait for the one
// rendering it. At most max scrapes are served at once; past that, 503
// with Retry-After at once. Safe for concurrent use.
type scrapeCache struct {
	h   http.Handler // promhttp over the registry
	ttl time.Duration
	now func() time.Time
	sem chan struct{} // one token per scrape in flight

	mu      sync.Mutex              // held while rendering
	entries map[string]*scrapeEntry // guarded by mu
}

// scrapeEntry is one rendered scrape, shared read-only once stored.
type scrapeEntry struct {
	at     time.Time
	status int
	header http.Header
	body   []byte
}

func newScrapeCache(reg *prometheus.Registry, ttl time.Duration, max int) *scrapeCache {
	if ttl == 0 {
		ttl = DefaultMetricsCacheTTL
	}
	if max <= 0 {
		max = DefaultMaxMetricsScrapes
	}
	return &scrapeCache{
		h: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ttl: ttl, now: time.Now,
		sem: make(chan struct{}, max), entries: map[string]*scrapeEntry{},
	}
}

func (c *scrapeCache) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case c.sem <- struct{}{}:
		defer func() { <-c.sem }()
	default:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "too many /metrics scrapes in flight; retry", http.StatusServiceUnavailable)
		return
	}
	e := c.get(r)
	for k, v := range e.header {
		w.Header()[k] = v
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(e.body)
}

// get returns a fresh rendering for r's variant, rendering it if needed.
func (c *scrapeCache) get(r *http.Request) *scrapeEntry {
	key := r.Header.Get("Accept") + "\x00" + r.Header.Get("Accept-Encoding")
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok && c.ttl > 0 && c.now().Sub(e.at) < c.ttl {
		return e
	}
	rec := &bufferedResponse{header: http.Header{}, status: http.StatusOK}
	c.h.ServeHTTP(rec, r)
	e := &scrapeEntry{at: c.now(), status: rec.status, header: rec.header, body: rec.body.Bytes()}
	if len(c.entries) >= maxScrapeVariants {
		clear(c.entries)
	}
	c.entries[key] = e
	return e
}

// bufferedResponse is an http.ResponseWriter that keeps the response.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header         { return b.header }
func (b *bufferedResponse) WriteHeader(status int)      { b.status = status }
func (b *bufferedResponse) Write(p []byte) (int, error) { return b.body.Write(p) }
