package engine

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// Partitions added to a tenant topic while its tail runs (an operator's
// kafka-topics --alter --partitions) are read from their start: a live
// subscription gets every event written to them, and a catch-up that
// started before they existed reads them too before it joins, each event
// once. Before, the tail read only the partitions it started with: the
// events of the new ones reached nobody.
func TestPartitionsAddedWhileRunningReachEveryReader(t *testing.T) {
	k := newKafkaEnv(t, 2)
	e := k.engine(func(c *Config) { c.PartitionCheck = 20 * time.Millisecond })
	ctx := context.Background()
	live, err := e.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*"), Queue: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	// A backlog the catch-up cannot pass while nobody reads it (queue 2).
	// Lossless, as the replays that read from a cursor are: a lossy one
	// that joined the tail before the tail read the backlog drops what
	// overflows its queue, the added partitions' events with it.
	for i := range 8 {
		k.produce(0, "task.progress", "old", i)
	}
	catch, err := e.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*"), Queue: 2, Lossless: true,
		From: []cursor.PartitionOffset{{Partition: 0, Offset: 0}, {Partition: 1, Offset: 0}}})
	if err != nil {
		t.Fatal(err)
	}
	defer catch.Close()

	adm := kadm.NewClient(k.prod)
	if _, err := adm.CreatePartitions(ctx, 2, k.topic); err != nil {
		t.Fatal(err)
	}
	tl := live.t
	gatewaytest.Poll(t, "the tail to read the added partitions", func() bool {
		tl.mu.Lock()
		defer tl.mu.Unlock()
		return len(tl.pos) == 4
	})
	g := k.g.WithNewProducer(t) // it knows the added partitions
	g.ProduceD(t, 2, "task.progress", "new2", 0)
	g.ProduceD(t, 3, "task.progress", "new3", 0)

	got := map[string]int{}
	for len(got) < 10 {
		d, ok := recv(t, live)
		if !ok {
			t.Fatalf("live subscription ended: %v", live.Err())
		}
		if d.Event != nil {
			got[d.Event.Attrs.ID]++
		}
	}
	for _, id := range []string{"evt_new2_0", "evt_new3_0"} {
		if got[id] != 1 {
			t.Fatalf("live subscription: %s delivered %d times (all: %v)", id, got[id], got)
		}
	}

	seen := map[string]int{}
	for seen["evt_new2_0"] == 0 || seen["evt_new3_0"] == 0 {
		d, ok := recv(t, catch)
		if !ok {
			t.Fatalf("catch-up subscription ended: %v (got %v)", catch.Err(), seen)
		}
		if d.Event != nil {
			seen[d.Event.Attrs.ID]++
		}
	}
	g.ProduceD(t, 3, "task.progress", "new3", 1) // after the join: from the tail
	for seen["evt_new3_1"] == 0 {
		d, ok := recv(t, catch)
		if !ok {
			t.Fatalf("catch-up subscription ended: %v", catch.Err())
		}
		if d.Event != nil {
			seen[d.Event.Attrs.ID]++
		}
	}
	if len(seen) != 11 {
		t.Fatalf("catch-up got %d distinct events, want 8 old and 3 new: %v", len(seen), seen)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("catch-up: %s delivered %d times", id, n)
		}
	}
}
