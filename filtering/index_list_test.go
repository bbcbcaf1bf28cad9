package filtering

import (
	"testing"

	"github.com/aep-gateway/aep-gateway/aep"
)

// TestIndexIdenticalChurn subscribes many identical filters of each kind of
// anchor, then unsubscribes them in an interleaved order, checking after
// every step that Match finds exactly the live ones and that no list holds
// more than twice its live entries.
func TestIndexIdenticalChurn(t *testing.T) {
	const n = 300
	a := &aep.Attrs{Dialect: aep.DialectD, Type: "task.progress", Session: "sess_01"}
	for _, js := range []string{`{"types":"task.*"}`, `{"types":"*","session_id":"sess_01"}`, `{"types":"*"}`, `{"types":["task.*","task.*","*.progress"]}`} {
		f := mustD(t, js)
		x := NewIndex()
		for i := range n {
			x.Add(ID(i), f)
		}
		live := map[ID]bool{}
		for i := range n {
			live[ID(i)] = true
		}
		// Odd IDs first, then even ones from the top: removals at both ends
		// and in the middle of the lists.
		var order []ID
		for i := 1; i < n; i += 2 {
			order = append(order, ID(i))
		}
		for i := n - 2; i >= 0; i -= 2 {
			order = append(order, ID(i))
		}
		var got []ID
		for k, id := range order {
			if !x.Remove(id) {
				t.Fatalf("%s: Remove(%d) found nothing", js, id)
			}
			delete(live, id)
			got = x.Match(a, got[:0])
			if len(got) != len(live) {
				t.Fatalf("%s: after %d removals Match found %d, want %d", js, k+1, len(got), len(live))
			}
			for _, g := range got {
				if !live[g] {
					t.Fatalf("%s: Match found removed %d", js, g)
				}
			}
			if size := listSizes(x.snap.Load()); size > 2*len(live)*3+3 { // up to 3 postings per filter
				t.Fatalf("%s: %d items filed for %d live subscriptions", js, size, len(live))
			}
		}
		if x.snap.Load().d[aep.DialectD].trie != nil || len(x.snap.Load().d[aep.DialectD].all.items) != 0 {
			t.Fatalf("%s: lists left behind", js)
		}
	}
}

// listSizes counts the items filed in the D lists a test filter can use.
func listSizes(s *snapshot) int {
	di := s.d[aep.DialectD]
	n := len(di.all.items)
	if l, ok := di.hash[fSession].get("sess_01"); ok {
		n += len(l.items)
	}
	var walk func(t *tnode)
	walk = func(t *tnode) {
		if t == nil {
			return
		}
		n += len(t.exact.items) + len(t.tail.items)
		walk(t.star)
		if c, ok := t.children.get("task"); ok {
			walk(c)
		}
	}
	walk(di.trie)
	return n
}

// TestIndexSnapshotKeepsRemoved: a reader of a snapshot taken before a
// removal still sees the removed subscription (the tombstone is stamped
// with a later generation); a reader of the new snapshot does not.
func TestIndexSnapshotKeepsRemoved(t *testing.T) {
	x := NewIndex()
	for i := range 10 {
		x.Add(ID(i), mustD(t, `{"types":"task.*"}`))
	}
	old := x.snap.Load()
	x.Remove(3)
	x.Remove(4)
	a := &aep.Attrs{Dialect: aep.DialectD, Type: "task.progress"}
	c := matchCtx{a: a, gen: old.gen}
	old.d[aep.DialectD].trie.walk(a.Type, 0, &c)
	if len(c.dst) != 10 {
		t.Fatalf("old snapshot matched %v, want all 10", c.dst)
	}
	if got := x.Match(a, nil); len(got) != 8 {
		t.Fatalf("new snapshot matched %v, want 8", got)
	}
}
