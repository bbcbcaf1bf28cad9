package engine

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/internal/pace"
)

// A catch-up whose consumer does not read stops queueing at its tenant's
// memory budget (not at its queue's length), waits, and goes on as the
// consumer reads: every event arrives, in order, and the budget is given
// back once it has joined the tail.
func TestCatchUpWaitsAtTheTenantBudget(t *testing.T) {
	k := newKafkaEnv(t, 1)
	const budget = 2 << 10 // about 8 of these events (recordBytes adds 128 each to their ~130 bytes)
	e := k.engine(func(c *Config) { c.TenantMemoryBudget, c.MemoryBudget = budget, 1<<20 })
	for i := range 50 {
		k.produce(0, "task.progress", "s", i)
	}
	s, err := e.Subscribe(context.Background(), Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*"), Queue: 64,
		From: []cursor.PartitionOffset{{Partition: 0, Offset: 0}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	gatewaytest.Poll(t, "the catch-up to wait at the budget", func() bool {
		_, used := e.budget.Used(testTenant)
		return used > budget/2 && s.q.Len() > 0
	})
	time.Sleep(100 * time.Millisecond) // it would queue on now, were it not bounded
	if n, used := s.q.Len(), func() int64 { _, u := e.budget.Used(testTenant); return u }(); n >= 40 || used > budget+512 {
		t.Fatalf("queued %d events holding %d bytes: the budget of %d did not hold", n, used, budget)
	}
	for i := range 50 {
		d, ok := recv(t, s)
		for ok && d.Event == nil { // the caught-up marker
			d, ok = recv(t, s)
		}
		if !ok || d.Event.Attrs.ID != "evt_s_"+strconv.Itoa(i) {
			t.Fatalf("delivery %d: %+v (ended %v)", i, d, !ok)
		}
	}
	gatewaytest.Poll(t, "the budget given back", func() bool {
		n, _ := e.budget.Used(testTenant)
		return n == 0
	})
}

// A catch-up is paced at its tenant's rate: 64 events of ~260 bytes
// counted (~16 KiB) through an 8 KiB/s tenant rate with 1 KiB buckets
// take about two seconds; the same replay unpaced is reported beside it.
func TestCatchUpIsPacedAtTheTenantRate(t *testing.T) {
	k := newKafkaEnv(t, 1)
	for i := range 64 {
		k.produce(0, "task.progress", "s", i)
	}
	replay := func(e *Engine) time.Duration {
		start := time.Now()
		s, err := e.Subscribe(context.Background(), Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*"), Queue: 128,
			From: []cursor.PartitionOffset{{Partition: 0, Offset: 0}}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for i := range 64 {
			d, ok := recv(t, s)
			for ok && d.Event == nil {
				d, ok = recv(t, s)
			}
			if !ok || d.Event.Attrs.ID != "evt_s_"+strconv.Itoa(i) {
				t.Fatalf("delivery %d: %+v (ended %v)", i, d, !ok)
			}
		}
		return time.Since(start)
	}
	unpaced := replay(k.engine(func(c *Config) { c.CatchUpRate, c.TenantCatchUpRate = -1, -1 }))
	paced := k.engine(func(c *Config) { c.CatchUpRate, c.TenantCatchUpRate, c.ReaderFetchBytes = -1, 8<<10, 1<<10 })
	paced.pacer = pace.NewWithBurst(0, 8<<10, 1<<10) // 8 KiB/s, 1 KiB steps: ~16 KiB of events take ~2 s
	took := replay(paced)
	t.Logf("64 events replayed unpaced in %v, paced at 8 KiB/s in %v", unpaced, took)
	if took < time.Second {
		t.Fatalf("a paced replay of ~16 KiB at 8 KiB/s took %v", took)
	}
}
