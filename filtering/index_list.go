package filtering

// filed is what a list of the index holds: an entry, or one pattern of an
// entry (a trie posting).
type filed interface{ owner() *entry }

func (e *entry) owner() *entry  { return e }
func (p posting) owner() *entry { return p.e }

// list is one list of the index as a snapshot holds it: the entries filed
// there, some of which may have been removed (tombstones, dead of them).
//
// Removing an entry does not copy the list: the entry is stamped with the
// generation of the snapshot that no longer holds it (entry.gone) and the
// list's dead count grows. A reader of that snapshot or a later one skips
// it; a reader of an older snapshot, whose generation is lower, still sees
// it, as it must. Once half the list is dead a writer copies the live
// items into a fresh slice (compaction): each removal costs O(1) amortised
// instead of a copy of the whole list, and a list holds at most twice its
// live entries.
//
// Lists are appended in place, like the slices they replace: that writes
// past the length older snapshots read. A compacted list is a new slice;
// published items are never modified.
type list[T filed] struct {
	items []T
	dead  int // items whose entry has been removed
}

// with returns l with x filed.
func (l list[T]) with(x T) list[T] {
	l.items = append(l.items, x)
	return l
}

// without returns l where one more of its items has been removed: the
// caller has stamped that item's entry as gone. The result is the zero
// list once nothing in it is live.
func (l list[T]) without() list[T] {
	l.dead++
	if l.dead*2 < len(l.items) {
		return l
	}
	var live []T
	for _, x := range l.items {
		if x.owner().gone.Load() == 0 {
			live = append(live, x)
		}
	}
	return list[T]{items: live}
}

// goneAt reports whether e was removed in the snapshot of generation gen or
// an earlier one.
func (e *entry) goneAt(gen uint64) bool {
	g := e.gone.Load()
	return g != 0 && g <= gen
}
