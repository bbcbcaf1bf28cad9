package durable

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/internal/queue"
)

// takeoverSlack is what a takeover may take beyond LeaseTTL on the shared
// test machine (journal round trips, polls).
const takeoverSlack = 1500 * time.Millisecond

// A holder's node dies (its stream neither releases nor checkpoints, its
// renewals stop); the consumer reconnects every 1 s or every 3 s (a client
// watchdog), alternating between two other nodes: every reconnect is a new
// claim, and still the stream is served within LeaseTTL of the dead
// holder's last renewal when those nodes followed the tenant's journal
// before (acks posted there), or of their first look at the journal when
// they did not; the unacknowledged events come again as attempt 2.
func TestDurableTakeoverConvergesAfterHolderDied(t *testing.T) {
	for _, tc := range []struct {
		every time.Duration
		warm  bool
	}{{time.Second, true}, {3 * time.Second, true}, {3 * time.Second, false}} {
		t.Run(fmt.Sprintf("reconnect every %v, nodes following: %v", tc.every, tc.warm), func(t *testing.T) {
			k, eA := durableEnv(t, 1)
			gate := gatewaytest.FailProduces(k.cluster)
			eB, eC := k.engine(nil), k.engine(nil)
			const group = "g-converge"
			startDurable(t, eA, group)
			long := AckPolicy{AckTimeout: time.Hour}
			sA := openDurable(t, eA, group, long, 0)
			for i := range 3 {
				k.produce(0, "task.updated", "s0", i)
			}
			for range 3 {
				recvD(t, sA)
			}
			if tc.warm {
				for _, e := range []*Cluster{eB, eC} {
					if err := e.JournalAcks(context.Background(), testTenantT, "sub_t", []string{"evt_none"}, nil, nil); err != nil {
						t.Fatal(err)
					}
				}
				// die well after a renewal, before the next: counting from
				// the kill or a claim would then take a second longer
				gatewaytest.PollEvery(t, gatewaytest.Wait, 100*time.Millisecond, "a second since the holder's last renewal", func() bool {
					last, ok := lastRenewal(t, k, eA.NodeID())
					return ok && time.Since(last) >= time.Second
				})
			}
			gate.Store(true)
			died := time.Now()
			eA.Close() // its last words (checkpoint, release) are refused
			gate.Store(false)
			from, slack := died, takeoverSlack
			if tc.warm {
				from, _ = lastRenewal(t, k, eA.NodeID())
				slack = 750 * time.Millisecond
			}

			nodes := []*Cluster{eB, eC}
			var s *DurableStream
			for i := 0; s == nil; i++ {
				if time.Since(from) > LeaseTTL+slack {
					t.Fatalf("not served %v after the holder's last renewal or the kill (%d claims)", time.Since(from), i)
				}
				ctx, cancel := context.WithTimeout(context.Background(), tc.every)
				var err error
				s, err = nodes[i%2].OpenDurable(ctx, DurableRequest{
					Tenant: testTenantT, SubscriptionID: "sub_t", Group: group, Filter: mustFilter(t, "types=task.*"),
					Policy: long, CommitInterval: 20 * time.Millisecond, DeadLetter: testDeadLetterCodec,
				})
				cancel()
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("claim %d: %v", i, err)
				}
			}
			t.Cleanup(s.Close)
			t.Logf("served %v after the holder's last renewal (warm) or the kill, %v after the kill",
				time.Since(from).Round(time.Millisecond), time.Since(died).Round(time.Millisecond))
			for range 3 {
				if d := recvD(t, s); d.Attempt != 2 {
					t.Fatalf("after the takeover: %s attempt %d, want 2", d.Event.Attrs.ID, d.Attempt)
				}
			}
		})
	}
}

// lastRenewal is when node's last renewal in the journal was sent (its
// own clock: the tests run on one machine).
func lastRenewal(t *testing.T, k *kafkaEnv, node string) (time.Time, bool) {
	t.Helper()
	var last time.Time
	ok := false
	for _, rec := range journalRecords(t, k) {
		if rec.T == jRenew && rec.Node == node && rec.At.After(last) {
			last, ok = rec.At, true
		}
	}
	return last, ok
}

// A holder whose renewals stall (its journal writes fail, as for a node
// cut off from Kafka or SIGSTOPped) hands out nothing once its lease ran
// out, not even what already waits in its queue: the stream ends with
// ErrLeaseLost.
func TestDurableStalledHolderDeliversNothingAfterItsLease(t *testing.T) {
	k, e := durableEnv(t, 1)
	gate := gatewaytest.FailProduces(k.cluster)
	const group = "g-stall"
	startDurable(t, e, group)
	s := openDurableReq(t, e, DurableRequest{Group: group, Policy: AckPolicy{AckTimeout: time.Hour}, Queue: 64})
	for i := range 5 {
		k.produce(0, "task.updated", "s0", i)
	}
	gatewaytest.Poll(t, "five deliveries queued", func() bool { return s.Deliveries().Len() == 5 })
	gate.Store(true)
	stalled := time.Now()
	// the stall outlasts the lease (no renewal sent after stalled succeeds)
	gatewaytest.Poll(t, "a stall longer than the lease", func() bool { return time.Since(stalled) > LeaseHold+time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if d, ok := s.Deliveries().Recv(ctx); ok {
		t.Fatalf("%s handed out %v after the stall began, past its lease", d.Event.Attrs.ID, time.Since(stalled))
	}
	if !errors.Is(s.Err(), ErrLeaseLost) {
		t.Fatalf("ended with %v, want ErrLeaseLost", s.Err())
	}
}

// BenchmarkDurableNext: what the lease gate (Hand, through Next) adds to
// taking a delivery from a durable stream's queue; the baseline in the
// same run takes it from the queue directly.
func BenchmarkDurableNext(b *testing.B) {
	ev := &Event{Record: &kgo.Record{}}
	for _, gated := range []bool{false, true} {
		b.Run(fmt.Sprint("gated=", gated), func(b *testing.B) {
			s := &DurableStream{q: queue.New[DurableDelivery](64), w: &watcher{}}
			s.w.extend(time.Now().Add(time.Hour))
			d := DurableDelivery{Kind: DurableEvent, Event: ev, Attempt: 1}
			b.ReportAllocs()
			for b.Loop() {
				s.q.Offer(d)
				var ok bool
				if gated {
					_, ok, _ = s.Next()
				} else {
					_, ok, _ = s.q.Next()
				}
				if !ok {
					b.Fatal("nothing queued")
				}
			}
		})
	}
}
