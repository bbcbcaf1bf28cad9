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
	"encoding/binary"
	"hash/maphash"
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

// Key is an event's identity within a tenant, with a hash of its bytes
// as received (Body): a client's retry sends the same bytes, so only an
// event with the same identity and the same bytes is a duplicate; another
// event under a reused id is written like any other (the gateway never
// drops an event it has not stored).
type Key struct {
	Tenant, Source, ID string
	Body               uint64
}

// hkey is a Key's 128-bit hash (two seeded maphashes): the window keeps
// no strings, so the garbage collector has nothing to scan in it and an
// identity costs the same whatever its length. Two identities share an
// hkey with odds about n²/2¹²⁹ for n remembered.
type hkey struct{ a, b uint64 }

func (w *Window) hash(k Key) hkey {
	return hkey{w.sum(w.seeds[0], k), w.sum(w.seeds[1], k)}
}

func (w *Window) sum(seed maphash.Seed, k Key) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteString(k.Tenant)
	h.WriteByte(0)
	h.WriteString(k.Source)
	h.WriteByte(0)
	h.WriteString(k.ID)
	h.WriteByte(0)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], k.Body)
	h.Write(b[:])
	return h.Sum64()
}

// Position is where an event landed.
type Position struct {
	Partition int32
	Offset    int64
}

// Window remembers recent event identities.
type Window struct {
	max   int
	ttl   time.Duration
	now   func() time.Time
	seeds [2]maphash.Seed

	mu      sync.Mutex
	entries map[hkey]entry         // by value and pointer-free: nothing per identity for the GC to scan
	waiters map[hkey]chan struct{} // of pending identities someone waits for; closed on resolution
	fifo    []fifoItem             // accepted entries in acceptance order, from fifo[head]
	head    int
}

type entry struct {
	pending bool // a write is unresolved: the event may or may not be in the log
	pos     Position
	at      int64 // when accepted, Unix nanoseconds
}

type fifoItem struct {
	k  hkey
	at int64
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
	return &Window{max: cfg.Max, ttl: cfg.TTL, now: cfg.Now, entries: make(map[hkey]entry), waiters: make(map[hkey]chan struct{}),
		seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}}
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
func (w *Window) Reserve(key Key) Claim {
	k := w.hash(key)
	w.mu.Lock()
	defer w.mu.Unlock()
	// Eviction runs in Accept; here an entry past its age is only ignored.
	if e, ok := w.entries[k]; ok && (e.pending || e.at >= w.now().Add(-w.ttl).UnixNano()) {
		if e.pending {
			ch, ok := w.waiters[k]
			if !ok {
				ch = make(chan struct{})
				w.waiters[k] = ch
			}
			return Claim{Wait: ch}
		}
		return Claim{Known: true, Pos: e.pos}
	}
	w.entries[k] = entry{pending: true}
	return Claim{Owned: true}
}

// Accept records that k's event is in the log at pos, waking waiters.
func (w *Window) Accept(key Key, pos Position) {
	k := w.hash(key)
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now().UnixNano()
	if e, ok := w.entries[k]; ok && !e.pending {
		return // already known: keep its first position and time
	}
	w.wakeLocked(k)
	w.entries[k] = entry{pos: pos, at: now}
	w.fifo = append(w.fifo, fifoItem{k, now})
	w.evictLocked()
}

// Forget records that k's pending write did not land, waking waiters.
func (w *Window) Forget(key Key) {
	k := w.hash(key)
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.entries[k]; ok && e.pending {
		w.wakeLocked(k)
		delete(w.entries, k)
	}
}

// wakeLocked wakes the waiters of k's pending write. Must hold mu.
func (w *Window) wakeLocked(k hkey) {
	if ch, ok := w.waiters[k]; ok {
		close(ch)
		delete(w.waiters, k)
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
	cutoff := w.now().Add(-w.ttl).UnixNano()
	for ; w.head < len(w.fifo); w.head++ {
		it := w.fifo[w.head]
		if len(w.fifo)-w.head <= w.max && it.at >= cutoff {
			break
		}
		if e, ok := w.entries[it.k]; ok && !e.pending && e.at == it.at {
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
