package pace

import (
	"context"
	"sync"
	"testing"
	"time"
)

// A tenant reading past its rate waits for it, while another tenant reads
// at once; the node's rate holds for all; a cancelled reader returns.
func TestPacerSharesTenantsAndNode(t *testing.T) {
	p := NewWithBurst(0, 4<<20, 1<<20) // 4 MiB/s per tenant, 1 MiB buckets
	ctx := context.Background()
	start := time.Now()
	for range 3 { // 3 MiB: the first 1 MiB from the bucket, 2 more at 4 MiB/s
		if err := p.Wait(ctx, "a", 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Fatalf("3 MiB at 4 MiB/s (1 MiB burst) took %v, want >= 0.5s", d)
	}
	start = time.Now()
	if err := p.Wait(ctx, "b", 1<<20); err != nil || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("tenant b waited %v behind a (%v)", time.Since(start), err)
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := p.Wait(cctx, "a", 1<<20); err == nil {
		// a's bucket is empty: 1 MiB needs 250 ms
		t.Fatal("a cancelled wait returned nil")
	}

	// node: 4 MiB/s shared by 4 tenants reading 1 MiB each twice: >= 0.75 s
	n := NewWithBurst(4<<20, 0, 1<<20)
	start = time.Now()
	var wg sync.WaitGroup
	for _, ten := range []string{"w", "x", "y", "z"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2 {
				_ = n.Wait(ctx, ten, 1<<20)
			}
		}()
	}
	wg.Wait()
	if d := time.Since(start); d < 1500*time.Millisecond {
		t.Fatalf("8 MiB through a 4 MiB/s node took %v", d)
	}
	var none *Pacer
	if err := none.Wait(ctx, "a", 1<<30); err != nil || New(0, 0) != nil {
		t.Fatal("a nil pacer must not wait")
	}
}
