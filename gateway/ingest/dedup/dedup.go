// Package dedup is ingest's idempotency window: it remembers, per event
// identity (tenant, source, id), the log position of events recently
// written and the writes still unresolved, so that a client retrying an
// event after an ambiguous answer ("it may or may not be in the log") gets
// the original record's position instead of a second record.
//
// The window is one node's: it is exact for retries that land on the node
// that wrote (or tried to write) the event, within Max entries and TTL.
// docs/operations.md ("Broker outages") states what is left to consumers.
// A Window is safe for concurrent use.
package dedup

import (
	"sync"
	"time"
)

// Defaults of a zero Config.
const (
	DefaultMax = 100_000
	DefaultTTL = 10 * time.Minute
)

// Config bounds a Window. Zero fields take the defaults.
type Config struct {
	Max int           // accepted identities remembered (the oldest go first)
	TTL time.Duration // how long an accepted identity is remembered
	Now func() time.Time
}

// Key is an event's identity within a tenant.
type Key struct{ Tenant, Source, ID string }

// Position is where an event landed.
type Position struct {
	Partition int32
	Offset    int64
}

// Window remembers recent event identities.
type Window struct {
	max int
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries map[Key]*entry
	fifo    []fifoItem // accepted entries in acceptance order, from fifo[head]
	head    int
}

type entry struct {
	pending bool          // a write is unresolved: the event may or may not be in the log
	done    chan struct{} // closed when a pending write is resolved
	pos     Position
	at      time.Time // when accepted
}

type fifoItem struct {
	k  Key
	at time.Time
}

// New returns an empty Window.
func New(cfg Config) *Window {
	if cfg.Max <= 0 {
		cfg.Max = DefaultMax
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Window{max: cfg.Max, ttl: cfg.TTL, now: cfg.Now, entries: make(map[Key]*entry)}
}

// Claim is the answer of Reserve for one identity.
type Claim struct {
	// Owned: the caller reserved the identity and must write the event,
	// then call Accept, Forget (not written) or leave it pending (the
	// outcome is unknown) and later call Accept or Forget.
	Owned bool
	// Known: the event is already in the log at Pos.
	Known bool
	Pos   Position
	// Wait, when neither Owned nor Known, is closed once another write of
	// the same identity is resolved: call Reserve again then.
	Wait <-chan struct{}
}

// Reserve claims k for writing unless it is known or being written.
func (w *Window) Reserve(k Key) Claim {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.evictLocked()
	if e, ok := w.entries[k]; ok {
		if e.pending {
			return Claim{Wait: e.done}
		}
		return Claim{Known: true, Pos: e.pos}
	}
	w.entries[k] = &entry{pending: true, done: make(chan struct{})}
	return Claim{Owned: true}
}

// Accept records that k's event is in the log at pos, waking waiters.
func (w *Window) Accept(k Key, pos Position) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	e, ok := w.entries[k]
	if !ok {
		e = &entry{}
		w.entries[k] = e
	}
	if e.pending {
		close(e.done)
	} else if ok {
		return // already known: keep its first position and time
	}
	e.pending, e.done, e.pos, e.at = false, nil, pos, now
	w.fifo = append(w.fifo, fifoItem{k, now})
	w.evictLocked()
}

// Forget records that k's pending write did not land, waking waiters.
func (w *Window) Forget(k Key) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.entries[k]; ok && e.pending {
		close(e.done)
		delete(w.entries, k)
	}
}

// Len is the number of identities remembered, pending ones included.
func (w *Window) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.entries)
}

// evictLocked drops accepted entries past the count or the age bound.
// Pending entries stay until resolved (the producer's delivery timeout
// bounds them). Must hold mu.
func (w *Window) evictLocked() {
	cutoff := w.now().Add(-w.ttl)
	for ; w.head < len(w.fifo); w.head++ {
		it := w.fifo[w.head]
		if len(w.fifo)-w.head <= w.max && !it.at.Before(cutoff) {
			break
		}
		if e, ok := w.entries[it.k]; ok && !e.pending && e.at.Equal(it.at) {
			delete(w.entries, it.k)
		}
		w.fifo[w.head] = fifoItem{}
	}
	// Compact once the dead head is half the slice: amortised O(1).
	if w.head > 0 && w.head >= len(w.fifo)/2 {
		w.fifo = w.fifo[:copy(w.fifo, w.fifo[w.head:])]
		w.head = 0
	}
}
