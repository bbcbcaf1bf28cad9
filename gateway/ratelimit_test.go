package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestTenantLimiterBucket(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newTenantLimiter(RateLimit{EventsPerSecond: 10, Burst: 20}, func() time.Time { return now })
	if _, ok := l.take("a", 20); !ok {
		t.Fatal("a full bucket refused its burst")
	}
	wait, ok := l.take("a", 5)
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("empty bucket: ok=%v wait=%v, want 500ms", ok, wait)
	}
	if _, ok := l.take("b", 20); !ok {
		t.Fatal("tenants share a bucket")
	}
	now = now.Add(500 * time.Millisecond)
	if _, ok := l.take("a", 5); !ok {
		t.Fatal("refill did not happen")
	}
	if wait, ok := l.take("a", 21); ok || wait >= 0 {
		t.Fatalf("a request over the burst must never pass: %v %v", wait, ok)
	}
	now = now.Add(time.Hour)
	l.take("c", 1)
	l.mu.Lock()
	n := len(l.buckets)
	l.mu.Unlock()
	if n != 1 {
		t.Fatalf("idle buckets not pruned: %d left", n)
	}
}

func TestRateLimitedIngestIsRefusedWhole(t *testing.T) {
	g := newTestGateway(t, func(c *Config) { c.RateLimit = RateLimit{EventsPerSecond: 0.001, Burst: 3} })
	batch := rEvent("s", 1) + "\n" + rEvent("s", 2) + "\n"
	if resp := g.postR("application/x-ndjson", []byte(batch)); resp.status != http.StatusAccepted {
		t.Fatalf("within the burst: %d %s", resp.status, resp.body)
	}
	if resp := g.post("/aep/events", "application/x-ndjson", nil, []byte(dEvent(9, "s")+"\n")); resp.status != http.StatusAccepted {
		t.Fatalf("the last token: %d %s", resp.status, resp.body)
	}
	resp := g.postR("application/x-ndjson", []byte(batch))
	if resp.status != http.StatusTooManyRequests || resp.json(t)["error"] != "limit-exceeded" || resp.header.Get("Retry-After") == "" {
		t.Fatalf("over the rate: %d %v %s", resp.status, resp.header, resp.body)
	}
	resp = g.post("/aep/events", "application/x-ndjson", nil, []byte(dEvent(0, "s")+"\n"))
	if resp.status != http.StatusTooManyRequests || resp.json(t)["error"].(map[string]any)["retryable"] != true {
		t.Fatalf("D over the rate: %d %s", resp.status, resp.body)
	}
	resp = g.post("/aep/events", "application/x-ndjson", nil, []byte(strings.Repeat(dEvent(0, "s")+"\n", 4)))
	if resp.status != http.StatusTooManyRequests || resp.json(t)["error"].(map[string]any)["retryable"] != false {
		t.Fatalf("D over the burst (never passes, not retryable as is): %d %s", resp.status, resp.body)
	}
	if n := g.records("aep.default.events"); n != 3 {
		t.Fatalf("%d records; only the 3 events within the burst may be written", n)
	}
}
