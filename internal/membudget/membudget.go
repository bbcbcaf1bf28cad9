// Package membudget is a byte budget shared by the streams of a node: one
// limit for the node and one for each tenant, so that no tenant takes the
// node's memory whatever it asks for, and the node never exceeds its own.
// A holder takes bytes before it keeps something in memory and gives them
// back when it lets go; TryAcquire never blocks, Changed tells a waiter
// when bytes came back.
package membudget

import (
	"sync"
)

// Budget is safe for concurrent use. A nil *Budget grants everything.
type Budget struct {
	node, tenant int64

	mu       sync.Mutex
	used     int64            // guarded by mu
	byTenant map[string]int64 // guarded by mu
	changed  chan struct{}    // closed (and replaced) when bytes come back; guarded by mu
}

// New returns a budget of node bytes in all and tenant bytes for each
// tenant (at most node). A limit of 0 or less means none.
func New(node, tenant int64) *Budget {
	if node > 0 && (tenant <= 0 || tenant > node) {
		tenant = node
	}
	return &Budget{node: node, tenant: tenant, byTenant: map[string]int64{}, changed: make(chan struct{})}
}

// TryAcquire takes n bytes for tenant when both limits have room; true
// when taken. A tenant holding nothing may always take one amount, and so
// may anyone on a node where nothing is held: a single item larger than a
// limit must still pass (one at a time), or its reader would wait for
// ever.
func (b *Budget) TryAcquire(tenant string, n int64) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.byTenant[tenant]
	if b.tenant > 0 && t > 0 && t+n > b.tenant {
		return false
	}
	if b.node > 0 && b.used > 0 && b.used+n > b.node {
		return false
	}
	b.used += n
	b.byTenant[tenant] = t + n
	return true
}

// Release gives back n bytes of tenant.
func (b *Budget) Release(tenant string, n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	if t := b.byTenant[tenant] - n; t > 0 {
		b.byTenant[tenant] = t
	} else {
		delete(b.byTenant, tenant)
	}
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// Changed is closed at the next Release: a waiter selects on it, then
// tries again.
func (b *Budget) Changed() <-chan struct{} {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

// Used is what the node holds, and tenant of it.
func (b *Budget) Used(tenant string) (node, ofTenant int64) {
	if b == nil {
		return 0, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.byTenant[tenant]
}
