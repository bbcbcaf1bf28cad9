package filtering

import (
	"sync"
	"sync/atomic"

	"github.com/aep-gateway/aep-gateway/aep"
)

// ID identifies a subscription in an Index. The caller assigns it.
type ID uint64

// anchor says where in the index a subscription is filed. Every
// subscription is filed in exactly one place, so it is a candidate at most
// once per event (the trie reports a subscription only for its first
// matching pattern).
type anchor uint8

const (
	anchorNone anchor = iota // never matches: kept for Len and Remove only
	anchorHash               // exact values of one string field
	anchorTrie               // type patterns
	anchorSev                // R severity levels
	anchorCap                // R capture levels
	anchorAll                // no selective predicate: checked for every event
)

type entry struct {
	id     ID
	f      *Filter
	anchor anchor
	fld    field
	gone   atomic.Uint64 // generation of the first snapshot without it; 0 while filed
}

// dialectIndex is the part of a snapshot serving one dialect.
type dialectIndex struct {
	hash [numFields]postings
	trie *tnode
	sev  [len(severityLevels)]list[*entry]
	cap  [len(captureLevels)]list[*entry]
	all  list[*entry]
}

// snapshot is one immutable version of the whole index.
type snapshot struct {
	d   [3]*dialectIndex // by aep.Dialect; [DialectUnknown] stays nil
	n   int
	gen uint64 // one more for each write
}

// Index holds the active subscriptions of a node and finds, for one event,
// the subscriptions whose filter matches it.
//
// Matching reads an immutable snapshot through one atomic load: it takes no
// lock, never waits for a writer and never allocates when dst has room.
// Add and Remove serialize on a mutex, build a new snapshot by copying only
// the parts they change (one path of a persistent map, one trie path, or
// one level list), and publish it atomically. A Match that started before
// a write completes sees the old set; one that starts after sees the new.
// The maps inside a snapshot are persistent hash tries (pmap), so a write
// copies O(log n) small nodes, not the index. Removal leaves a tombstone
// in the lists (see list): no list is copied on every unsubscribe, and a
// Match only looks at an entry's removal generation in a list that holds
// tombstones.
type Index struct {
	mu   sync.Mutex // serializes writers
	byID map[ID]*entry
	snap atomic.Pointer[snapshot]
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	x := &Index{byID: make(map[ID]*entry)}
	x.snap.Store(&snapshot{})
	return x
}

// Len is the number of subscriptions in the index.
func (x *Index) Len() int { return x.snap.Load().n }

// Add files the filter under id, replacing the filter id had before, if
// any. A nil filter, or one not made by a parser (no dialect), is ignored.
// Safe to call concurrently with everything.
func (x *Index) Add(id ID, f *Filter) {
	if f == nil || (f.dialect != aep.DialectD && f.dialect != aep.DialectR) {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	s := *x.snap.Load()
	s.gen++
	if old, ok := x.byID[id]; ok {
		old.gone.Store(s.gen)
		s.d[old.f.dialect] = unfile(s.d[old.f.dialect], old)
		s.n--
	}
	e := &entry{id: id, f: f}
	e.anchor, e.fld = chooseAnchor(f)
	di := s.d[f.dialect]
	if di == nil {
		di = &dialectIndex{}
	}
	s.d[f.dialect] = file(di, e)
	s.n++
	x.byID[id] = e
	x.snap.Store(&s)
}

// Remove takes id out of the index and reports whether it was there. Safe
// to call concurrently with everything.
func (x *Index) Remove(id ID) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.byID[id]
	if !ok {
		return false
	}
	delete(x.byID, id)
	s := *x.snap.Load()
	s.gen++
	e.gone.Store(s.gen)
	s.d[e.f.dialect] = unfile(s.d[e.f.dialect], e)
	s.n--
	x.snap.Store(&s)
	return true
}

// Get returns the filter filed under id.
func (x *Index) Get(id ID) (*Filter, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.byID[id]
	if !ok {
		return nil, false
	}
	return e.f, true
}

// chooseAnchor picks the most selective place to file f: its first exact
// string predicate (fields are ordered most selective first), else its
// type patterns, else (dialect R) its severity or capture levels, else the
// list checked for every event.
func chooseAnchor(f *Filter) (anchor, field) {
	switch {
	case f.never:
		return anchorNone, 0
	case len(f.strs) > 0:
		return anchorHash, f.strs[0].f
	case f.hasTypes && !f.typeAll:
		return anchorTrie, 0
	case f.sevMask != 0:
		return anchorSev, 0
	case f.capMask != 0:
		return anchorCap, 0
	}
	return anchorAll, 0
}

// file returns a copy of di with e filed. Slices are appended in place:
// readers of older snapshots read only up to their own length.
func file(old *dialectIndex, e *entry) *dialectIndex {
	di := *old
	f := e.f
	switch e.anchor {
	case anchorHash:
		for _, v := range f.strs[0].set.vals {
			di.hash[e.fld] = withEntry(di.hash[e.fld], v, e)
		}
	case anchorTrie:
		for i := range f.types {
			p := &f.types[i]
			di.trie = di.trie.with(p.segs, p.tail, posting{e: e, pat: i})
		}
	case anchorSev:
		for r := range di.sev {
			if f.sevMask&(1<<r) != 0 {
				di.sev[r] = di.sev[r].with(e)
			}
		}
	case anchorCap:
		for r := range di.cap {
			if f.capMask&(1<<r) != 0 {
				di.cap[r] = di.cap[r].with(e)
			}
		}
	case anchorAll:
		di.all = di.all.with(e)
	}
	return &di
}

// unfile returns a copy of di without e, which the caller has stamped as
// gone: exactly the lists file put it in count one more tombstone.
func unfile(old *dialectIndex, e *entry) *dialectIndex {
	di := *old
	f := e.f
	switch e.anchor {
	case anchorHash:
		for _, v := range f.strs[0].set.vals {
			di.hash[e.fld] = withoutEntry(di.hash[e.fld], v)
		}
	case anchorTrie:
		for i := range f.types {
			p := &f.types[i]
			di.trie = di.trie.without(p.segs, p.tail)
		}
	case anchorSev:
		for r := range di.sev {
			if f.sevMask&(1<<r) != 0 {
				di.sev[r] = di.sev[r].without()
			}
		}
	case anchorCap:
		for r := range di.cap {
			if f.capMask&(1<<r) != 0 {
				di.cap[r] = di.cap[r].without()
			}
		}
	case anchorAll:
		di.all = di.all.without()
	}
	return &di
}

// matchCtx carries one Match call through the trie walk.
type matchCtx struct {
	a   *aep.Attrs
	dst []ID
	gen uint64 // of the snapshot read
}

// emit appends the entries of l that match. A list without tombstones
// needs no look at removal generations: nothing in it was removed by this
// snapshot's time.
func (c *matchCtx) emit(l list[*entry]) {
	for _, e := range l.items {
		if l.dead != 0 && e.goneAt(c.gen) {
			continue
		}
		if e.f.Match(c.a) {
			c.dst = append(c.dst, e.id)
		}
	}
}

func (c *matchCtx) emitPostings(l list[posting]) {
	for _, p := range l.items {
		if l.dead != 0 && p.e.goneAt(c.gen) {
			continue
		}
		if p.e.f.firstTypeMatch(c.a.Type) == p.pat && p.e.f.Match(c.a) {
			c.dst = append(c.dst, p.e.id)
		}
	}
}

// Match appends to dst the IDs of the subscriptions whose filter matches
// the event, each once, in no particular order, and returns the extended
// slice. Its cost is a constant number of hash lookups, a walk of the type
// trie along the event's type, and one filter evaluation per candidate
// filed under one of the event's values. It never allocates when dst has
// room, and is safe to call concurrently with Add and Remove.
func (x *Index) Match(a *aep.Attrs, dst []ID) []ID {
	s := x.snap.Load()
	if int(a.Dialect) >= len(s.d) || s.d[a.Dialect] == nil {
		return dst
	}
	di := s.d[a.Dialect]
	c := matchCtx{a: a, dst: dst, gen: s.gen}
	for fld := field(0); fld < numFields; fld++ {
		if di.hash[fld].Len() != 0 {
			if v := fld.get(a); v != "" {
				list, _ := di.hash[fld].get(v)
				c.emit(list)
			}
		}
	}
	if di.trie != nil {
		di.trie.walk(a.Type, 0, &c)
	}
	if a.Dialect == aep.DialectR {
		if r := severityRank(a.Severity); r >= 0 {
			c.emit(di.sev[r])
		}
		if r := captureRank(a.Capture); r >= 0 {
			c.emit(di.cap[r])
		}
	}
	c.emit(di.all)
	return c.dst
}
