package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// The records of one fetch wake a subscriber once per round of wakeEvery,
// not once each: a parked stream then writes them together. Every record
// still arrives, in order.
func TestDispatchWakesOncePerRound(t *testing.T) {
	for _, n := range []int{20, 150} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			k := newKafkaEnv(t, 1)
			e := k.engine(nil)
			s, err := e.Subscribe(context.Background(), Request{Tenant: testTenantT, Filter: mustFilter(t, "types=task.*")})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var wakes atomic.Int64
			s.Deliveries().OnReady(func() { wakes.Add(1) })
			// One produce request: the records are one batch, which a
			// fetch returns whole.
			recs := make([]*kgo.Record, n)
			for i := range recs {
				a := aep.Attrs{Dialect: aep.DialectD, ID: fmt.Sprintf("evt_w_%d", i), Type: "task.progress", Source: "agent:t", Session: "w"}
				val := fmt.Sprintf(`{"aep_version":"0.1","id":%q,"type":"task.progress","source":"agent:t","session_id":"w","created_at":"2026-01-01T00:00:00Z","payload":{}}`, a.ID)
				recs[i] = &kgo.Record{Topic: k.topic, Partition: 0, Key: []byte("w"), Value: []byte(val), Headers: partitioning.AppendHeaders(nil, &a)}
			}
			if err := k.prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				d, ok := recv(t, s)
				if !ok || d.Event == nil {
					t.Fatalf("stream ended or marker at %d: %+v %v", i, d, s.Err())
				}
				if want := fmt.Sprintf("evt_w_%d", i); d.Event.Attrs.ID != want {
					t.Fatalf("delivery %d is %s, want %s", i, d.Event.Attrs.ID, want)
				}
			}
			most := int64(n/wakeEvery + 2) // the rounds, and a fetch boundary
			if w := wakes.Load(); w < 1 || w > most {
				t.Fatalf("%d records woke the subscriber %d times, want 1..%d", n, w, most)
			}
		})
	}
}

// The forwarded feed (LiveWorkers) wakes a subscriber once per round of a
// poll too, not once per forwarded record.
func TestFeedWakesOncePerRound(t *testing.T) {
	k := newWorkersEnv(t, 1)
	k.worker("g-wake")
	e := k.node("node-w")
	s, err := e.Subscribe(context.Background(), Request{Tenant: testTenantT, Filter: mustFilter(t, "types=task.*")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	waitFor(t, "the subscription joins the forwarded feed", func() bool { return joined(s) })
	var wakes atomic.Int64
	s.Deliveries().OnReady(func() { wakes.Add(1) })
	const n = 20
	recs := make([]*kgo.Record, n)
	var want []string
	for i := range recs {
		a := aep.Attrs{Dialect: aep.DialectD, ID: fmt.Sprintf("evt_f_%d", i), Type: "task.progress", Source: "agent:t", Session: "f"}
		val := fmt.Sprintf(`{"aep_version":"0.1","id":%q,"type":"task.progress","source":"agent:t","session_id":"f","created_at":"2026-01-01T00:00:00Z","payload":{}}`, a.ID)
		recs[i] = &kgo.Record{Topic: k.topic, Partition: 0, Key: []byte("f"), Value: []byte(val), Headers: partitioning.AppendHeaders(nil, &a)}
		want = append(want, a.ID)
	}
	if err := k.prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	expectStream(t, s, want, 0)
	if w := wakes.Load(); w < 1 || w > n/2 {
		t.Fatalf("%d forwarded records woke the subscriber %d times, want 1..%d", n, w, n/2)
	}
}
