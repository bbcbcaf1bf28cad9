// Package pace paces readers by the bytes they read per second: one token
// bucket for the node and one per tenant, so that one tenant's replays take
// at most its share of the broker's and the node's time, however many
// streams it opens (docs/security.md "Catch-up pacing").
package pace

import (
	"context"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Pacer is safe for concurrent use. A nil *Pacer never waits.
type Pacer struct {
	node        *rate.Limiter // nil: no node rate
	tenantRate  rate.Limit    // 0: no tenant rate
	tenantBurst int

	mu        sync.Mutex
	tenants   map[string]*rate.Limiter // guarded by mu
	lastPrune time.Time                // guarded by mu
}

// New paces at node bytes per second in all and tenant bytes per second
// for each tenant; 0 or less is no limit (both: New returns nil). A
// bucket holds 1/16 s of its rate, between 64 KiB and 1 MiB: a reader
// starting cold takes little more than its rate even in its first
// fraction of a second, when an unpaced replay hurts the others most.
func New(node, tenant float64) *Pacer {
	if node <= 0 && tenant <= 0 {
		return nil
	}
	p := &Pacer{tenants: map[string]*rate.Limiter{}}
	if node > 0 {
		p.node = rate.NewLimiter(rate.Limit(node), burstOf(node))
	}
	if tenant > 0 {
		p.tenantRate, p.tenantBurst = rate.Limit(tenant), burstOf(tenant)
	}
	return p
}

// NewWithBurst is New with buckets of burst bytes (tests pace small reads).
func NewWithBurst(node, tenant float64, burst int) *Pacer {
	p := New(node, tenant)
	if p != nil {
		if p.node != nil {
			p.node.SetBurst(burst)
		}
		p.tenantBurst = burst
	}
	return p
}

func burstOf(perSecond float64) int {
	return int(math.Min(1<<20, math.Max(64<<10, perSecond/16)))
}

// Wait blocks until tenant may read n more bytes, taking them a bucket at a
// time (a large fetch is paid in full, as bucket-sized steps), or ctx ends.
func (p *Pacer) Wait(ctx context.Context, tenant string, n int) error {
	if p == nil {
		return nil
	}
	var tl *rate.Limiter
	if p.tenantRate > 0 {
		tl = p.tenant(tenant)
	}
	for n > 0 {
		step := n
		if tl != nil {
			step = min(step, p.tenantBurst)
		}
		if p.node != nil {
			step = min(step, p.node.Burst())
		}
		if tl != nil {
			if err := tl.WaitN(ctx, step); err != nil {
				return err
			}
		}
		if p.node != nil {
			if err := p.node.WaitN(ctx, step); err != nil {
				return err
			}
		}
		n -= step
	}
	return nil
}

// tenant is tenant's bucket. Buckets that have refilled are equivalent to
// new ones and are dropped now and then, so memory follows the tenants
// reading recently.
func (p *Pacer) tenant(name string) *rate.Limiter {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if now.Sub(p.lastPrune) > time.Minute {
		p.lastPrune = now
		for t, l := range p.tenants {
			if l.TokensAt(now) >= float64(p.tenantBurst) {
				delete(p.tenants, t)
			}
		}
	}
	l := p.tenants[name]
	if l == nil {
		l = rate.NewLimiter(p.tenantRate, p.tenantBurst)
		p.tenants[name] = l
	}
	return l
}
