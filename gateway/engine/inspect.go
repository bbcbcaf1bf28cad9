package engine

import "github.com/aep-gateway/aep-gateway/gateway/tenant"

// TailInfo is a snapshot of the shared reader of a tenant's topic on this
// node, for health checks, metrics and tests.
type TailInfo struct {
	// Dispatched counts the records the reader has offered to
	// subscriptions since the topic was empty: the sum over partitions of
	// the next offset it reads.
	Dispatched int64
	// Joined are the subscriptions reading from it (not catching up).
	Joined []*Subscription
}

// Tail returns the snapshot of t's shared reader; false when none runs
// (no subscription of t is open on this node).
func (e *Engine) Tail(t tenant.Tenant) (TailInfo, bool) {
	e.mu.Lock()
	tl := e.tails[e.cfg.Naming.Events(t.String())]
	e.mu.Unlock()
	if tl == nil {
		return TailInfo{}, false
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var info TailInfo
	for _, p := range tl.pos {
		info.Dispatched += p
	}
	for _, s := range tl.subs {
		info.Joined = append(info.Joined, s)
	}
	return info, true
}
