package membudget

import (
	"sync"
	"testing"
)

// A tenant past its share waits while another tenant still takes bytes;
// the node's limit holds for all; bytes given back let the waiter in; one
// item larger than a limit passes when its tenant holds nothing.
func TestBudgetLimitsTenantsAndNode(t *testing.T) {
	b := New(100, 60)
	if !b.TryAcquire("a", 50) || b.TryAcquire("a", 20) {
		t.Fatal("tenant a: 50 of 60 taken, 20 more must wait")
	}
	if !b.TryAcquire("b", 40) {
		t.Fatal("tenant b: 40 must pass beside a's 50 (node 90 of 100)")
	}
	if b.TryAcquire("c", 20) {
		t.Fatal("tenant c: 20 more would take the node to 110 of 100")
	}
	ch := b.Changed()
	b.Release("a", 50)
	select {
	case <-ch:
	default:
		t.Fatal("Changed not closed by Release")
	}
	if !b.TryAcquire("c", 20) {
		t.Fatal("after a's release, c's 20 must pass")
	}
	if n, ta := b.Used("a"); n != 60 || ta != 0 {
		t.Fatalf("used %d, a %d; want 60, 0", n, ta)
	}
	b.Release("b", 40)
	b.Release("c", 20)
	if !b.TryAcquire("d", 500) {
		t.Fatal("one item larger than both limits must pass on an empty node")
	}
	if b.TryAcquire("d", 1) || b.TryAcquire("e", 1) {
		t.Fatal("while it is held, nothing else passes the node's limit")
	}
}

// Concurrent takers never hold more than the limits together.
func TestBudgetConcurrentNeverOver(t *testing.T) {
	b := New(1000, 400)
	var wg sync.WaitGroup
	var mu sync.Mutex
	over := false
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tn := string(rune('a' + i%3))
			for range 2000 {
				if b.TryAcquire(tn, 30) {
					n, tt := b.Used(tn)
					if n > 1000 || tt > 400 {
						mu.Lock()
						over = true
						mu.Unlock()
					}
					b.Release(tn, 30)
				}
			}
		}()
	}
	wg.Wait()
	if over {
		t.Fatal("a limit was exceeded")
	}
	if n, _ := b.Used("a"); n != 0 {
		t.Fatalf("%d bytes left held", n)
	}
}

func TestNilBudgetGrantsEverything(t *testing.T) {
	var b *Budget
	if !b.TryAcquire("a", 1<<40) {
		t.Fatal("nil budget refused")
	}
	b.Release("a", 1<<40)
	if b.Changed() != nil {
		t.Fatal("nil budget's Changed must be nil (never ready)")
	}
}
