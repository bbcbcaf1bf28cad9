package gateway

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimit bounds how many events one tenant may ingest: a token bucket
// refilled at EventsPerSecond up to Burst. The zero value disables it.
type RateLimit struct {
	EventsPerSecond float64
	Burst           int // zero means one second's worth
}

func (r RateLimit) enabled() bool { return r.EventsPerSecond > 0 }

// tenantLimiter holds one token bucket (golang.org/x/time/rate) per tenant.
// Buckets of tenants idle for longer than a full refill are equivalent to
// new ones and are pruned, so memory is bounded by the number of recently
// active tenants.
type tenantLimiter struct {
	rate  rate.Limit
	burst int
	full  time.Duration // an empty bucket's refill time
	now   func() time.Time

	mu        sync.Mutex
	buckets   map[string]*rate.Limiter // guarded by mu
	lastPrune time.Time                // guarded by mu
}

func newTenantLimiter(r RateLimit, now func() time.Time) *tenantLimiter {
	burst := r.Burst
	if burst <= 0 {
		burst = int(math.Max(1, math.Ceil(r.EventsPerSecond)))
	}
	full := time.Duration(float64(burst) / r.EventsPerSecond * float64(time.Second))
	return &tenantLimiter{rate: rate.Limit(r.EventsPerSecond), burst: burst, full: full, now: now, buckets: map[string]*rate.Limiter{}}
}

// take removes n tokens from tenant's bucket if it holds them. Otherwise it
// takes nothing and returns how long until n tokens will be there (or
// ok=false with wait<0 when n exceeds the burst and can never be taken).
func (l *tenantLimiter) take(tenant string, n int) (wait time.Duration, ok bool) {
	now := l.now()
	l.mu.Lock()
	l.pruneLocked(now)
	b := l.buckets[tenant]
	if b == nil {
		b = rate.NewLimiter(l.rate, l.burst)
		l.buckets[tenant] = b
	}
	l.mu.Unlock()
	if n > l.burst {
		return -1, false
	}
	if b.AllowN(now, n) {
		return 0, true
	}
	r := b.ReserveN(now, n) // only to learn the wait: given back at once
	defer r.CancelAt(now)
	return r.DelayFrom(now), false
}

// pruneLocked drops buckets that have refilled completely. Must hold mu.
func (l *tenantLimiter) pruneLocked(now time.Time) {
	if now.Sub(l.lastPrune) < l.full {
		return
	}
	l.lastPrune = now
	for t, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, t)
		}
	}
}
