package durable

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// Deliveries that were reserved (a deliver record), queued, taken by a
// transport that never wrote them, or written into a connection that then
// dropped before the client acknowledged anything after them, across
// several takeovers between two nodes, are no attempts: the events come
// again marked (they may have been delivered) but are never dead-lettered
// for it.
func TestDurableUnhandedDeliveriesNeverDeadLetter(t *testing.T) {
	k, eA := durableEnv(t, 1)
	eB := k.engine(nil)
	const group = "g-unhanded"
	startDurable(t, eA, group)
	pol := AckPolicy{AckTimeout: time.Hour, MaxAttempts: 2}
	for i := range 5 {
		k.produce(0, "task.x", "s", i)
	}
	nodes := []*Cluster{eA, eB}
	for round := range 6 {
		s := openDurable(t, nodes[round%2], group, pol, 0)
		switch round % 3 {
		case 0:
			for range 5 { // taken by a transport whose writes failed
				if d := recvQueued(t, s); d.Kind != DurableEvent {
					t.Fatalf("round %d: %+v", round, d)
				}
			}
		case 1:
			// reserved and queued, never taken
			gatewaytest.Poll(t, "5 deliveries queued", func() bool { return s.Deliveries().Len() == 5 })
		case 2:
			for range 5 { // written, unread in the socket when it dropped
				if d := recvD(t, s); d.Kind != DurableEvent {
					t.Fatalf("round %d: %+v", round, d)
				}
			}
		}
		// the next round's stream, on the other node, takes it over
	}
	s := openDurable(t, nodes[0], group, pol, 0)
	for range 5 {
		d := recvD(t, s)
		if d.Kind != DurableEvent || d.Attempt != 2 {
			t.Fatalf("after the takeovers: %+v (want the event, marked as attempt 2)", d)
		}
		s.Ack(d.Event.Attrs.ID)
	}
	gatewaytest.Poll(t, "all committed", func() bool { return committed(t, eB, group)[0].Offset == 5 })
	if st := s.Stats(); st.DeadLettered != 0 || st.Acked != 5 {
		t.Fatalf("stats %+v", st)
	}
}

// An event that is never acknowledged is dead-lettered exactly after
// max_attempts hand-overs: one read before a drop (the client acked a
// later event), then two whose ack timeouts passed; a delivery taken but
// not written in between does not count, and the attempt numbers count
// hand-overs.
func TestDurableDeadLetterAfterHandedAttempts(t *testing.T) {
	k, eA := durableEnv(t, 1)
	eB := k.engine(nil)
	const group = "g-handed"
	startDurable(t, eA, group)
	clk := &testClock{}
	req := DurableRequest{Group: group, clock: clk.now, Policy: AckPolicy{AckTimeout: time.Hour, MaxAttempts: 3, Backoff: time.Millisecond}}
	k.produce(0, "task.x", "s", 1)
	k.produce(0, "task.x", "t", 2)
	open := func(e *Cluster) *DurableStream { return openDurableReq(t, e, req) }

	sA := open(eA)
	if d := recvD(t, sA); d.Attempt != 1 || d.Event.Attrs.ID != "evt_s_1" {
		t.Fatalf("first hand-over: %+v", d)
	}
	recvD(t, sA)
	sA.Ack("evt_t_2") // read after evt_s_1: evt_s_1 was read too
	if d := recvQueued(t, open(eB)); d.Kind != DurableEvent || d.Attempt != 2 {
		t.Fatalf("after the takeover: %+v (want the event marked as attempt 2)", d)
	}
	// the second stream's write failed: the third has one hand-over behind it
	s := open(eA)
	if d := recvD(t, s); d.Kind != DurableEvent || d.Attempt != 2 {
		t.Fatalf("second hand-over: %+v (want attempt 2)", d)
	}
	clk.advance(time.Hour + time.Second)
	if d := recvD(t, s); d.Kind != DurableEvent || d.Attempt != 3 {
		t.Fatalf("third hand-over: %+v (want attempt 3, not a dead letter)", d)
	}
	clk.advance(time.Hour + time.Second)
	d := recvD(t, s)
	if d.Kind != DurableDeadLettered || d.DeadLetter.Attempts != 3 || !d.DeadLetter.Reason.Exhausted {
		t.Fatalf("after the third hand-over timed out: %+v (want a dead letter after 3 attempts)", d)
	}
	if st := s.Stats(); st.Handed != 2 || st.DeadLettered != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A consumer that acknowledges everything it receives never sees a dead
// letter, whatever drops and takeovers happen: here every stream first
// loses a few deliveries (taken, never written), then hands some that the
// consumer acks, then writes a few more the consumer never reads, then is
// dropped or taken over by the other node.
func TestDurableAckingConsumerNeverDeadLetters(t *testing.T) {
	k, eA := durableEnv(t, 2)
	eB := k.engine(nil)
	const group = "g-acker"
	startDurable(t, eA, group)
	pol := AckPolicy{AckTimeout: time.Hour, MaxAttempts: 2}
	const total = 60
	for i := range total {
		k.produce(int32(i%2), "task.x", fmt.Sprintf("s%d", i%6), i)
	}
	rng := rand.New(rand.NewPCG(23, 1))
	nodes := []*Cluster{eA, eB}
	acked := map[string]bool{}
	var s *DurableStream
	for round := 0; len(acked) < total; round++ {
		if round > 60 {
			t.Fatalf("%d of %d acknowledged after 60 streams", len(acked), total)
		}
		if s != nil && round%2 == 0 {
			s.Close() // a drop; otherwise the next stream takes it over
		}
		s = openDurable(t, nodes[round%2], group, pol, 0)
		left := total - len(acked)
		lost := min(1+rng.IntN(3), left-1) // at least one handed: progress
		for range lost {
			if d := recvQueued(t, s); d.Kind != DurableEvent {
				t.Fatalf("round %d: %+v", round, d)
			}
		}
		read := min(1+rng.IntN(10), left-lost)
		for range read {
			d := recvD(t, s)
			if d.Kind != DurableEvent {
				t.Fatalf("round %d: a consumer that acks everything got %+v", round, d)
			}
			if acked[d.Event.Attrs.ID] {
				continue // a repeat of an event acked on an earlier stream is allowed, not expected here
			}
			acked[d.Event.Attrs.ID] = true
			if got := s.Ack(d.Event.Attrs.ID); got != OutcomeApplied {
				t.Fatalf("ack: %s", got)
			}
		}
		// written into the socket but unread when it drops
		for range min(rng.IntN(4), left-lost-read) {
			if d := recvD(t, s); d.Kind != DurableEvent {
				t.Fatalf("round %d: a consumer that acks everything got %+v", round, d)
			}
		}
		if st := s.Stats(); st.DeadLettered != 0 {
			t.Fatalf("round %d: stats %+v", round, st)
		}
	}
	// The last stream commits past every acknowledged event once it has
	// read that far (acks of earlier streams settle the offsets it reads);
	// closing it before then would leave the commit behind, with the acks
	// in the journal for the next stream.
	gatewaytest.Poll(t, "the last stream to commit to the end", func() bool {
		pcs := committed(t, eA, group)
		return pcs[0].Offset == total/2 && pcs[1].Offset == total/2
	})
	s.Close()
	if pcs := committed(t, eA, group); pcs[0].Offset != total/2 || pcs[1].Offset != total/2 {
		t.Fatalf("committed %+v after the close", pcs)
	}
}

// max_ack_pending bounds what is handed out and not acknowledged: with a
// cap of 5 and a consumer that acks nothing, 5 events come and no more;
// acks let exactly that many more come; redeliveries of the pending ones
// still go while the cap is reached.
func TestDurableMaxAckPending(t *testing.T) {
	k, e := durableEnv(t, 2)
	const group = "g-cap"
	startDurable(t, e, group)
	clk := &testClock{}
	s := openDurableReq(t, e, DurableRequest{Group: group, clock: clk.now, MaxAckPending: 5,
		Policy: AckPolicy{AckTimeout: time.Hour, MaxAttempts: 5, Backoff: time.Millisecond}})
	for i := range 20 {
		k.produce(int32(i%2), "task.x", fmt.Sprintf("s%d", i), i)
	}
	var got []string
	for range 5 {
		got = append(got, recvD(t, s).Event.Attrs.ID)
	}
	atCap := func(n uint64) {
		t.Helper()
		gatewaytest.Poll(t, "the stream to stop at the cap", func() bool { return s.Stats().CapReached > n })
		if st := s.Stats(); st.Pending != 5 || s.Deliveries().Len() != 0 {
			t.Fatalf("at the cap: stats %+v, %d queued", st, s.Deliveries().Len())
		}
	}
	atCap(0)
	capped := s.Stats().CapReached
	s.Ack(got[0])
	s.Ack(got[1])
	for range 2 {
		got = append(got, recvD(t, s).Event.Attrs.ID)
	}
	atCap(capped)
	clk.advance(time.Hour + time.Second)
	pending := map[string]bool{}
	for _, id := range got[2:] {
		pending[id] = true
	}
	for range 5 {
		d := recvD(t, s)
		if !pending[d.Event.Attrs.ID] || d.Attempt != 2 {
			t.Fatalf("redelivery at the cap: %+v (want one of %v, attempt 2)", d, pending)
		}
		delete(pending, d.Event.Attrs.ID)
	}
	for _, id := range got {
		s.Ack(id)
	}
	for range 13 {
		d := recvD(t, s)
		if d.Attempt != 1 {
			t.Fatalf("after the acks: %+v", d)
		}
		s.Ack(d.Event.Attrs.ID)
	}
	gatewaytest.Poll(t, "all committed", func() bool { pcs := committed(t, e, group); return pcs[0].Offset == 10 && pcs[1].Offset == 10 })
}

// An idle stream writes no checkpoint: ids acked ahead of their events
// that the stream has passed are pruned, and the checkpoint's encoding
// does not depend on map order, so the "unchanged" check holds.
func TestDurableIdleStreamWritesNoCheckpoints(t *testing.T) {
	k, e := durableEnv(t, 1)
	const group = "g-idle"
	startDurable(t, e, group)
	ids := make([]string, 10)
	for i := range ids {
		ids[i] = fmt.Sprintf("evt_unknown_%d", i)
	}
	if err := e.JournalAcks(context.Background(), testTenantT, "sub_t", ids, nil, nil); err != nil {
		t.Fatal(err)
	}
	s := openDurable(t, e, group, AckPolicy{AckTimeout: time.Hour}, 0)
	rounds := func(n int64) {
		t.Helper()
		gatewaytest.Poll(t, "commit rounds", func() bool { return s.commitRounds.Load() >= n })
	}
	rounds(3)
	before := checkpoints(t, k, e, "sub_t")
	rounds(s.commitRounds.Load() + 12)
	after := checkpoints(t, k, e, "sub_t")
	if len(after) != len(before) {
		t.Fatalf("an idle stream wrote %d checkpoints in 12 commit rounds", len(after)-len(before))
	}
	if last := after[len(after)-1]; len(last.Acks) != 0 {
		t.Fatalf("the checkpoint still carries %d stale acked ids", len(last.Acks))
	}
}

// checkpoints reads the journal's checkpoints of sub, oldest first.
func checkpoints(t *testing.T, k *kafkaEnv, e *Cluster, sub string) []journalRecord {
	t.Helper()
	topic := e.JournalTopic(testTenantT)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := newAdm(t, k).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, 0)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.cluster.ListenAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []journalRecord
	for next := int64(0); next < end.Offset; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read the journal up to %d of %d", next, end.Offset)
		}
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			next = r.Offset + 1
			var rec journalRecord
			if r.Offset < end.Offset && string(r.Key) == sub && json.Unmarshal(r.Value, &rec) == nil && rec.T == jCkpt {
				out = append(out, rec)
			}
		}
	}
	return out
}

// Counted hand-overs reach the journal after the fact, in the stream's
// periodic checkpoint (not only in its last one): deliveries written before
// one the client acknowledged count; a delivery taken but never written,
// and one written after the last ack, are listed as sent, not counted.
func TestDurableHandOversReachTheJournal(t *testing.T) {
	k, e := durableEnv(t, 1)
	const group = "g-journal"
	startDurable(t, e, group)
	s := openDurable(t, e, group, AckPolicy{AckTimeout: time.Hour}, 0)
	var offs []int64
	for i := range 4 {
		offs = append(offs, k.produce(0, "task.x", "s", i))
	}
	recvD(t, s)
	recvD(t, s)
	recvQueued(t, s)
	recvD(t, s)
	s.Ack("evt_s_3") // the client read up to here
	offs = append(offs, k.produce(0, "task.x", "s", 4))
	recvD(t, s) // written after: not known to be read
	var last journalPart
	gatewaytest.Poll(t, "a checkpoint with the hand-overs", func() bool {
		cks := checkpoints(t, k, e, "sub_t")
		if len(cks) == 0 || len(cks[len(cks)-1].Parts) == 0 {
			return false
		}
		last = cks[len(cks)-1].Parts[0]
		_, sent := last.A[offs[4]]
		return sent && len(last.D) == 2
	})
	if last.D[offs[0]] != 1 || last.D[offs[1]] != 1 || last.A[offs[2]] != 1 || last.D[offs[4]] != 0 {
		t.Fatalf("checkpoint %+v: want offsets %v counted once, %d and %d sent and not counted", last, offs[:2], offs[2], offs[4])
	}
	select {
	case <-s.Done():
		t.Fatal("the stream ended")
	default:
	}
}
