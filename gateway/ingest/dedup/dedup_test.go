package dedup

import (
	"runtime"
	"strconv"
	"testing"
	"time"
)

func TestReserveAcceptKnown(t *testing.T) {
	w := New(Config{})
	k := Key{"t", "agent:a", "evt_1", 0}
	if c := w.Reserve(k); !c.Owned {
		t.Fatalf("first reserve: %+v", c)
	}
	c := w.Reserve(k)
	if c.Owned || c.Known || c.Wait == nil {
		t.Fatalf("reserve while pending: %+v", c)
	}
	w.Accept(k, Position{2, 7})
	select {
	case <-c.Wait:
	default:
		t.Fatal("waiter not woken by Accept")
	}
	if c := w.Reserve(k); !c.Known || c.Pos != (Position{2, 7}) {
		t.Fatalf("after accept: %+v", c)
	}
	if c := w.Reserve(Key{"other", "agent:a", "evt_1", 0}); !c.Owned {
		t.Fatalf("another tenant's identity must be its own: %+v", c)
	}
}

func TestForgetLetsTheNextWriter(t *testing.T) {
	w := New(Config{})
	k := Key{"t", "s", "id", 0}
	w.Reserve(k)
	c := w.Reserve(k)
	w.Forget(k)
	select {
	case <-c.Wait:
	default:
		t.Fatal("waiter not woken by Forget")
	}
	if c := w.Reserve(k); !c.Owned {
		t.Fatalf("after forget: %+v", c)
	}
}

func TestBoundedByCountAndAge(t *testing.T) {
	now := time.Unix(1000, 0)
	w := New(Config{Max: 3, TTL: time.Minute, Now: func() time.Time { return now }})
	for i := range 10 {
		k := Key{"t", "s", string(rune('a' + i)), 0}
		w.Reserve(k)
		w.Accept(k, Position{0, int64(i)})
	}
	if n := w.Len(); n != 3 {
		t.Fatalf("Len = %d after 10 accepts with Max 3", n)
	}
	if c := w.Reserve(Key{"t", "s", "a", 0}); !c.Owned {
		t.Fatalf("the oldest identity should have been evicted: %+v", c)
	}
	if c := w.Reserve(Key{"t", "s", "j", 0}); !c.Known {
		t.Fatalf("the newest identity should be known: %+v", c)
	}
	now = now.Add(2 * time.Minute)
	if c := w.Reserve(Key{"t", "s", "j", 0}); !c.Owned {
		t.Fatalf("an identity older than TTL should be forgotten: %+v", c)
	}
	// Pending entries stay whatever their age: they are unresolved writes.
	if c := w.Reserve(Key{"t", "s", "a", 0}); c.Owned || c.Known {
		t.Fatalf("a pending identity must not be evicted: %+v", c)
	}
}

func BenchmarkReserveAccept(b *testing.B) {
	w := New(Config{Max: 10_000})
	keys := make([]Key, 50_000)
	for i := range keys {
		keys[i] = Key{"tenant", "agent:bench", string(rune(i)) + "id", 0}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := keys[i%len(keys)]
		if c := w.Reserve(k); c.Owned {
			w.Accept(k, Position{0, int64(i)})
		}
	}
}

// BenchmarkWindowMemory fills a window to DefaultMax and reports the heap
// it holds per identity.
func BenchmarkWindowMemory(b *testing.B) {
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		w := New(Config{})
		for i := range DefaultMax {
			k := Key{"tenant", "agent:bench", strconv.Itoa(i), 0}
			w.Reserve(k)
			w.Accept(k, Position{0, int64(i)})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/DefaultMax, "B/identity")
		runtime.KeepAlive(w)
	}
}
