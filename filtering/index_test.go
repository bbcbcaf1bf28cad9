package filtering

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aep-gateway/aep-gateway/aep"
)

// Vocabularies small enough that random filters and events often meet.
var (
	vTypes = []string{"memory.fact.added", "memory.episode.stored", "memory.fact", "memory", "memory.",
		"tool.call.progress", "tool.any.progress", "tool.call", "tool.call.x.progress", "tool..progress",
		"task.progress", "task.progress.more", "tool.completed", "tool.failed", "attention.requested",
		"attention", "x.acme.foo.bar", "a", "a.b.c.d", "a.x.c.y", ""}
	vDPatterns = []string{"*", "memory.*", "tool.*", "tool.call.*", "tool.*.progress", "*.progress", "*.*",
		"task.progress", "a.*.c.*", "tool.call", "a", "memory.fact.*", "*.fact.*", "attention.requested", "nope.x"}
	vRPatterns = []string{"memory.*", "tool.*", "tool.call.*", "x.acme.*", "a.b.*", "attention.*",
		"task.progress", "tool.completed", "attention", "a", "memory.fact.added", "nope.x"}
	vStrs   = []string{"v0", "v1", "v2", "v3"}
	vSev    = severityLevels[:]
	vCap    = captureLevels[:]
	vExtRaw = []string{`"x"`, `"y"`, `1`, `2`, `1.0`, `true`, `false`, `null`, `"1"`}
	vExtVal = []string{`"x"`, `"y"`, `1`, `2`, `true`, `false`, `"1"`}
)

func pick(r *rand.Rand, vs []string) string { return vs[r.IntN(len(vs))] }

// anyOf renders 1..3 picks as a JSON string or array.
func anyOf(r *rand.Rand, vs []string, quoteIt bool) string {
	n := 1 + r.IntN(3)
	parts := make([]string, n)
	for i := range parts {
		parts[i] = pick(r, vs)
		if quoteIt {
			parts[i] = jsonQ(parts[i])
		}
	}
	if n == 1 && r.IntN(2) == 0 {
		return parts[0]
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func randDFilter(r *rand.Rand) string {
	var m []string
	add := func(k, v string) { m = append(m, jsonQ(k)+":"+v) }
	if r.IntN(3) > 0 {
		add("types", anyOf(r, vDPatterns, true))
	}
	for _, k := range []string{"source", "target", "topic", "session_id", "conversation_id", "task_id"} {
		if r.IntN(4) == 0 {
			add(k, anyOf(r, vStrs, true))
		}
	}
	return "{" + strings.Join(m, ",") + "}"
}

func randRFilter(r *rand.Rand) string {
	var m []string
	add := func(k, v string) { m = append(m, jsonQ(k)+":"+v) }
	if r.IntN(2) == 0 {
		add("type", anyOf(r, vRPatterns, true))
	}
	for _, k := range []string{"id", "cause", "subject", "source", "agent", "session", "run", "step"} {
		if r.IntN(6) == 0 {
			add(k, anyOf(r, vStrs, true))
		}
	}
	if r.IntN(6) == 0 {
		add("epoch", anyOf(r, []string{"0", "1", "2", `"0"`}, false))
	}
	switch r.IntN(6) {
	case 0:
		add("severity", anyOf(r, vSev, true))
	case 1:
		lo, hi := r.IntN(6), r.IntN(6)
		if lo > hi {
			lo, hi = hi, lo
		}
		add("severity", `{"gte":"`+vSev[lo]+`","lte":"`+vSev[hi]+`"}`)
	case 2:
		add("severity", `{"gte":"`+pick(r, vSev)+`"}`)
	}
	if r.IntN(6) == 0 {
		add("capture", anyOf(r, vCap, true))
	}
	if r.IntN(6) == 0 {
		add(pick(r, []string{"acmea", "acmeb"}), anyOf(r, vExtVal, false))
	}
	return "{" + strings.Join(m, ",") + "}"
}

func randStr(r *rand.Rand) string {
	if r.IntN(4) == 0 {
		return ""
	}
	return pick(r, vStrs)
}

func randAttrs(r *rand.Rand) *aep.Attrs {
	a := &aep.Attrs{
		Dialect: aep.Dialect(r.IntN(3)),
		ID:      randStr(r), Type: pick(r, vTypes), Source: randStr(r),
		Session: randStr(r), Conversation: randStr(r), Task: randStr(r),
		Target: randStr(r), Topic: randStr(r), Agent: randStr(r),
		Subject: randStr(r), Run: randStr(r), Step: randStr(r),
		Cause: randStr(r),
	}
	if r.IntN(2) == 0 {
		a.Severity = pick(r, append([]string{"bogus"}, vSev...))
	}
	if r.IntN(2) == 0 {
		a.Capture = pick(r, vCap)
	}
	if r.IntN(2) == 0 {
		a.Epoch, a.HasEpoch = int64(r.IntN(3)), true
	}
	for _, n := range []string{"acmea", "acmeb"} {
		if r.IntN(2) == 0 {
			a.Ext = append(a.Ext, aep.Ext{Name: n, Value: []byte(pick(r, vExtRaw))})
		}
	}
	return a
}

// randFilter returns a random valid filter of either dialect.
func randFilter(t testing.TB, r *rand.Rand) *Filter {
	for {
		var f *Filter
		var err error
		if r.IntN(2) == 0 {
			f, err = ParseD([]byte(randDFilter(r)))
		} else {
			f, err = ParseR([]byte(randRFilter(r)))
		}
		if err == nil {
			return f
		}
	}
}

// TestIndexDifferential checks that the index returns exactly the
// subscriptions that evaluating every filter one by one returns, while
// subscriptions come, go and are replaced.
func TestIndexDifferential(t *testing.T) {
	t.Parallel()
	// 300 rounds at full size (AEP_TEST_LONG=1), 100 otherwise: the live
	// set then still grows to several hundred filters with every kind of
	// member, and the run must still find over 1000 matches.
	rounds := 100
	if longTests() {
		rounds = 300
	}
	r := rand.New(rand.NewPCG(1, 2))
	x := NewIndex()
	live := map[ID]*Filter{}
	var got, want []ID
	matched := 0
	for round := 0; round < rounds; round++ {
		for i := 0; i < 20; i++ {
			id := ID(r.IntN(2000))
			if r.IntN(4) == 0 {
				if x.Remove(id) != (live[id] != nil) {
					t.Fatalf("Remove(%d) disagrees with the model", id)
				}
				delete(live, id)
				continue
			}
			f := randFilter(t, r)
			x.Add(id, f)
			live[id] = f
		}
		if x.Len() != len(live) {
			t.Fatalf("Len %d, want %d", x.Len(), len(live))
		}
		for i := 0; i < 50; i++ {
			a := randAttrs(r)
			got = x.Match(a, got[:0])
			want = want[:0]
			for id, f := range live {
				if f.Match(a) {
					want = append(want, id)
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("round %d event %+v:\n index  %v\n brute  %v", round, *a, got, want)
			}
			matched += len(got)
		}
	}
	if matched < 1000 {
		t.Fatalf("only %d matches over the run: the generators do not exercise matching", matched)
	}
	for id := range live {
		x.Remove(id)
	}
	if x.Len() != 0 {
		t.Fatalf("Len %d after removing everything", x.Len())
	}
	s := x.snap.Load()
	for d, di := range s.d {
		if di == nil {
			continue
		}
		for fld, m := range di.hash {
			if m.Len() != 0 || m.root != nil {
				t.Errorf("dialect %d field %d: hashed map left behind", d, fld)
			}
		}
		if di.trie != nil || len(di.all.items) != 0 {
			t.Errorf("dialect %d: trie or wildcard list left behind", d)
		}
	}
}

func TestIndexBasics(t *testing.T) {
	x := NewIndex()
	a := &aep.Attrs{Dialect: aep.DialectD, Type: "memory.fact.added", Source: "s", Session: "sess"}
	x.Add(1, mustD(t, `{"types":"memory.*"}`))
	x.Add(2, mustD(t, `{"types":["memory.*","memory.fact.*","*.fact.added"]}`)) // reported once
	x.Add(3, mustD(t, `{"types":"*","session_id":"sess"}`))
	x.Add(4, mustD(t, `{"types":"tool.*"}`))
	x.Add(5, mustR(t, `{}`)) // R never sees D events
	x.Add(6, nil)            // ignored
	x.Add(8, &Filter{})      // ignored: no dialect
	got := x.Match(a, nil)
	slices.Sort(got)
	if !slices.Equal(got, []ID{1, 2, 3}) {
		t.Fatalf("got %v", got)
	}
	// Replacing a filter re-files it.
	x.Add(1, mustD(t, `{"types":"tool.*"}`))
	if x.Len() != 5 {
		t.Fatalf("Len %d", x.Len())
	}
	got = x.Match(a, got[:0])
	slices.Sort(got)
	if !slices.Equal(got, []ID{2, 3}) {
		t.Fatalf("after replace got %v", got)
	}
	if f, ok := x.Get(1); !ok || f.String() != `{"types":["tool.*"]}` {
		t.Fatalf("Get(1) = %v %v", f, ok)
	}
	if x.Remove(42) {
		t.Fatal("removed an unknown id")
	}
	if !x.Remove(3) || x.Remove(3) {
		t.Fatal("Remove(3) twice")
	}
	// Unknown dialect events match nothing, even {} of R.
	if (&Filter{}).Match(&aep.Attrs{}) {
		t.Fatal("the zero Filter matched")
	}
	if got := x.Match(&aep.Attrs{Type: "memory.fact.added"}, nil); len(got) != 0 {
		t.Fatalf("unknown dialect matched %v", got)
	}
	if got := x.Match(&aep.Attrs{Dialect: aep.DialectR, Type: "a"}, nil); !slices.Equal(got, []ID{5}) {
		t.Fatalf("R event matched %v", got)
	}
	// Inert filters count but never match.
	x.Add(7, mustR(t, `{"session":5}`))
	if x.Len() != 5 || len(x.Match(&aep.Attrs{Dialect: aep.DialectR, Session: "5"}, nil)) != 1 {
		t.Fatal("inert filter")
	}
}

// TestIndexConcurrent matches events while other goroutines subscribe and
// unsubscribe. Run with -race. A subscription that stays in the index for
// the whole test must be found by every Match.
func TestIndexConcurrent(t *testing.T) {
	t.Parallel()
	x := NewIndex()
	x.Add(0, mustD(t, `{"types":"memory.*","session_id":"stable"}`))
	x.Add(1, mustR(t, `{"type":"tool.*"}`))
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; i < 3000; i++ {
				id := ID(10 + r.IntN(500))
				if r.IntN(3) == 0 {
					x.Remove(id)
				} else {
					x.Add(id, randFilter(t, r))
				}
			}
			stop.Store(true)
		}(w)
	}
	var errs atomic.Int64
	for m := 0; m < 2; m++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := &aep.Attrs{Dialect: aep.DialectD, Type: "memory.fact", Session: "stable"}
			rr := &aep.Attrs{Dialect: aep.DialectR, Type: "tool.failed"}
			var dst []ID
			for n := 0; !stop.Load() || n < 100; n++ {
				dst = x.Match(d, dst[:0])
				if !slices.Contains(dst, 0) {
					errs.Add(1)
				}
				dst = x.Match(rr, dst[:0])
				if !slices.Contains(dst, 1) {
					errs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if errs.Load() != 0 {
		t.Fatalf("%d matches missed a stable subscription", errs.Load())
	}
}

// TestZeroAlloc pins the zero-allocation promise of Filter.Match and
// Index.Match (a failing assertion, not a timing).
func TestZeroAlloc(t *testing.T) {
	f := mustR(t, `{"type":["tool.*","attention.*"],"severity":{"gte":"notice"},"acmeregion":["eu\u002d1",5]}`)
	a := rAttrs(t, `{"type":"tool.failed","severity":"error","acmeregion":"eu\u002d1"}`)
	if !f.Match(a) {
		t.Fatal("no match")
	}
	d := mustD(t, `{"types":["tool.*.progress","memory.*"],"source":"s","session_id":["a","b"]}`)
	da := &aep.Attrs{Dialect: aep.DialectD, Type: "tool.call.progress", Source: "s", Session: "b"}
	if !d.Match(da) {
		t.Fatal("no match")
	}
	x := NewIndex()
	x.Add(1, f)
	x.Add(2, d)
	x.Add(3, mustD(t, `{"types":["tool.*.progress","tool.call.*"]}`))
	dst := make([]ID, 0, 8)
	if n := testing.AllocsPerRun(200, func() {
		f.Match(a)
		d.Match(da)
		dst = x.Match(da, dst[:0])
		dst = x.Match(a, dst[:0])
	}); n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
}
