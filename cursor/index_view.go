package cursor

import (
	"slices"
	"sort"
	"sync"
)

// indexView is the in-memory form of the index topic: every checkpoint by
// session and layout, and every partition marker. The Resolver fills it
// from the topic; it is safe for concurrent use.
type indexView struct {
	mu       sync.RWMutex
	sessions map[string][]*sessionIndex // one entry per layout the session was seen in
	markers  map[layout]int64
	applied  int64 // records applied, for tests and metrics
	cps      int64 // checkpoints held
}

// sessionIndex holds one session's checkpoints in one layout, sorted by
// offset, with the running maximum of their positions: positions usually
// grow with offsets, but backfill (AEP-0001 §7.2) may put a lower position
// later in the log, and the running maximum keeps the search exact then.
type sessionIndex struct {
	l      layout
	cps    []checkpoint
	maxPos []Position
}

func newIndexView() *indexView {
	return &indexView{sessions: map[string][]*sessionIndex{}, markers: map[layout]int64{}}
}

// apply folds one index record into the view. Malformed records are
// skipped (and counted by the caller): the view never fails on topic data.
func (v *indexView) apply(key, value []byte) error {
	if len(key) == 0 {
		return errIndexRecord
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.applied++
	switch key[0] {
	case 'm':
		if value == nil {
			l, _, err := parseMarker(key, []byte{indexFormat, 1, 0})
			if err == nil {
				delete(v.markers, l)
			}
			return nil
		}
		l, x, err := parseMarker(key, value)
		if err != nil {
			return err
		}
		if x > v.markers[l] {
			v.markers[l] = x
		}
	case 'c':
		if value == nil {
			return nil // tombstones carry no layout; checkpoints are never deleted by the indexer
		}
		s, l, c, err := parseCheckpoint(key, value)
		if err != nil {
			return err
		}
		v.insertLocked(s, l, c)
	default:
		return errIndexRecord
	}
	return nil
}

// insertLocked adds a checkpoint; v.mu must be held for writing.
func (v *indexView) insertLocked(session string, l layout, c checkpoint) {
	var si *sessionIndex
	for _, x := range v.sessions[session] {
		if x.l == l {
			si = x
			break
		}
	}
	if si == nil {
		si = &sessionIndex{l: l}
		v.sessions[session] = append(v.sessions[session], si)
	}
	n := len(si.cps)
	i := n
	if n > 0 && si.cps[n-1].offset >= c.offset {
		i = sort.Search(n, func(j int) bool { return si.cps[j].offset >= c.offset })
		if i < n && si.cps[i].offset == c.offset {
			si.cps[i] = c // a re-indexed event: same position by construction
			si.recomputeFrom(i)
			return
		}
	}
	si.cps = slices.Insert(si.cps, i, c)
	si.maxPos = slices.Insert(si.maxPos, i, Position{})
	si.recomputeFrom(i)
	v.cps++
}

func (si *sessionIndex) recomputeFrom(i int) {
	for ; i < len(si.cps); i++ {
		p := si.cps[i].pos()
		if i > 0 && si.maxPos[i-1].Compare(p) > 0 {
			p = si.maxPos[i-1]
		}
		si.maxPos[i] = p
	}
}

// lookup is what the Resolver needs about one session position.
type lookup struct {
	before, after  checkpoint // greatest checkpoint before the first one past pos; that first one
	hasBefore      bool
	hasAfter       bool
	marker         int64 // -1 when the partition has no marker
	otherLayouts   []layout
	sessionIndexed bool // the session has checkpoints in this layout
}

func (v *indexView) lookup(session string, l layout, pos Position) lookup {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := lookup{marker: -1}
	if x, ok := v.markers[l]; ok {
		out.marker = x
	}
	for _, si := range v.sessions[session] {
		if si.l != l {
			out.otherLayouts = append(out.otherLayouts, si.l)
			continue
		}
		out.sessionIndexed = len(si.cps) > 0
		// First checkpoint whose position, or any before it, is past pos.
		i := sort.Search(len(si.maxPos), func(j int) bool { return si.maxPos[j].Compare(pos) > 0 })
		if i > 0 {
			out.before, out.hasBefore = si.cps[i-1], true
		}
		if i < len(si.cps) {
			out.after, out.hasAfter = si.cps[i], true
		}
	}
	return out
}

func (v *indexView) stats() (applied, checkpoints int64) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.applied, v.cps
}

// around returns the session's last checkpoint below off and its first at
// or above off, in layout l.
func (v *indexView) around(session string, l layout, off int64) (below, above checkpoint, hasBelow, hasAbove bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, si := range v.sessions[session] {
		if si.l != l {
			continue
		}
		i := sort.Search(len(si.cps), func(j int) bool { return si.cps[j].offset >= off })
		if i > 0 {
			below, hasBelow = si.cps[i-1], true
		}
		if i < len(si.cps) {
			above, hasAbove = si.cps[i], true
		}
	}
	return below, above, hasBelow, hasAbove
}
