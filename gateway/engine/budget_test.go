package engine

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
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
