package gateway

import (
	"math"
	"sync"
	"time"
)

// RateLimit bounds how many events one tenant may ingest: a token bucket
// refilled at EventsPerSecond up to Burst. The zero value disables it.
type RateLimit struct {
	EventsPerSecond float64
	Burst           int // zero means one second's worth
}

func (r RateLimit) enabled() bool { return r.EventsPerSecond > 0 }

// tenantLimiter holds one token bucket per tenant. Buckets of tenants idle
// for longer than a full refill are equivalent to new ones and are pruned,
// so memory is bounded by the number of recently active tenants.
type tenantLimiter struct {
	rate  float64
	burst float64
	now   func() time.Time

	mu        sync.Mutex
	buckets   map[string]*bucket // guarded by mu
	lastPrune time.Time          // guarded by mu
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newTenantLimiter(r RateLimit, now func() time.Time) *tenantLimiter {
	burst := float64(r.Burst)
	if burst <= 0 {
		burst = math.Max(1, r.EventsPerSecond)
	}
	return &tenantLimiter{rate: r.EventsPerSecond, burst: burst, now: now, buckets: map[string]*bucket{}}
}

// take removes n tokens from tenant's bucket if it holds them. Otherwise it
// takes nothing and returns how long until n tokens will be there (or
// ok=false with wait<0 when n exceeds the burst and can never be taken).
func (l *tenantLimiter) take(tenant string, n int) (wait time.Duration, ok bool) {
	now := l.now()
	need := float64(n)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pruneLocked(now)
	b := l.buckets[tenant]
	if b == nil {
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[tenant] = b
	}
	b.tokens = math.Min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if need > l.burst {
		return -1, false
	}
	if b.tokens >= need {
		b.tokens -= need
		return 0, true
	}
	return time.Duration((need - b.tokens) / l.rate * float64(time.Second)), false
}

// pruneLocked drops buckets that have refilled completely. Must hold mu.
func (l *tenantLimiter) pruneLocked(now time.Time) {
	full := time.Duration(l.burst / l.rate * float64(time.Second))
	if now.Sub(l.lastPrune) < full {
		return
	}
	l.lastPrune = now
	for t, b := range l.buckets {
		if now.Sub(b.at) >= full {
			delete(l.buckets, t)
		}
	}
}
