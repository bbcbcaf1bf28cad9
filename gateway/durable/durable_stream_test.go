package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// durableEnv creates the dead-letter topic next to the events topic and
// commits the start of a subscription at the current end.
func durableEnv(t *testing.T, parts int32) (*kafkaEnv, *Cluster) {
	t.Helper()
	k := newKafkaEnv(t, parts)
	adm := newAdm(t, k)
	if _, err := adm.CreateTopic(context.Background(), parts, 1, nil, partitioning.Naming{}.DeadLetter(testTenant)); err != nil {
		t.Fatal(err)
	}
	return k, k.engine(nil)
}

func startDurable(t *testing.T, e *Cluster, group string) {
	t.Helper()
	ctx := context.Background()
	st, err := e.State(ctx, testTenantT)
	if err != nil {
		t.Fatal(err)
	}
	start := make([]cursor.PartitionOffset, st.Partitions)
	for p := range start {
		start[p] = cursor.PartitionOffset{Partition: int32(p), Offset: st.End[p]}
	}
	if err := e.CommitStart(ctx, testTenantT, group, st, start); err != nil {
		t.Fatal(err)
	}
}

func openDurable(t *testing.T, e *Cluster, group string, pol AckPolicy, window int) *DurableStream {
	t.Helper()
	return openDurableReq(t, e, DurableRequest{Group: group, Policy: pol, Window: window})
}

func openDurableReq(t *testing.T, e *Cluster, req DurableRequest) *DurableStream {
	t.Helper()
	req.Tenant, req.Filter, req.CommitInterval = testTenantT, mustFilter(t, "types=task.*"), 20*time.Millisecond
	if req.SubscriptionID == "" {
		req.SubscriptionID = "sub_t" // one stream of a subscription at a time: tests of two set their own
	}
	req.DeadLetter = testDeadLetterCodec
	s, err := e.OpenDurable(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// recvD takes the next delivery and, as a transport that wrote it to its
// client would, confirms it handed.
func recvD(t *testing.T, s *DurableStream) DurableDelivery {
	t.Helper()
	d := recvQueued(t, s)
	if d.Kind == DurableEvent {
		s.Handed(d)
	}
	return d
}

// recvQueued takes the next delivery from the stream's queue without
// confirming it: a transport whose write failed, or that never wrote it.
func recvQueued(t *testing.T, s *DurableStream) DurableDelivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, ok := s.Deliveries().Recv(ctx)
	if ctx.Err() != nil {
		t.Fatal("no durable delivery within 10s")
	}
	if !ok {
		t.Fatalf("stream ended: %v", s.Err())
	}
	return d
}

func committed(t *testing.T, e *Cluster, group string) map[int32]partCommit {
	t.Helper()
	_, pcs, _, err := fetchDurable(context.Background(), e.adm, group, partitioning.Naming{}.Events(testTenant))
	if err != nil {
		t.Fatal(err)
	}
	return pcs
}

// Acked events are committed past; unacked ones come again on the next
// stream with attempt 2, and only they.
func TestDurableResumeRedeliversUnacked(t *testing.T) {
	k, e := durableEnv(t, 2)
	const group = "g-resume"
	startDurable(t, e, group)
	long := AckPolicy{AckTimeout: time.Hour}
	s := openDurable(t, e, group, long, 0)
	for i := range 10 {
		k.produce(int32(i%2), "task.updated", fmt.Sprintf("s%d", i%2), i)
		k.produce(int32(i%2), "chat.message", fmt.Sprintf("s%d", i%2), 100+i) // filtered out
	}
	unacked := map[string]bool{}
	for i := range 10 {
		d := recvD(t, s)
		if d.Kind != DurableEvent || d.Attempt != 1 || d.Sequence != uint64(i+1) {
			t.Fatalf("delivery %d: %+v", i, d)
		}
		if i == 3 || i == 6 {
			unacked[d.Event.Attrs.ID] = true
			continue
		}
		if got := s.Ack(d.Event.Attrs.ID); got != OutcomeApplied {
			t.Fatalf("ack: %s", got)
		}
		if got := s.Ack(d.Event.Attrs.ID); got != OutcomeUnknown {
			t.Fatalf("duplicate ack: %s", got)
		}
	}
	if st := s.Stats(); st.Pending != 2 || st.Acked != 8 {
		t.Fatalf("stats %+v", st)
	}
	s.Close()
	if got := s.Ack("evt_s0_0"); got != OutcomeClosed {
		t.Fatalf("ack after close: %s", got)
	}

	s2 := openDurable(t, e, group, long, 0)
	for range 2 {
		d := recvD(t, s2)
		if !unacked[d.Event.Attrs.ID] || d.Attempt != 2 {
			t.Fatalf("redelivery %s attempt %d", d.Event.Attrs.ID, d.Attempt)
		}
		delete(unacked, d.Event.Attrs.ID)
		s2.Ack(d.Event.Attrs.ID)
	}
	k.produce(0, "task.done", "s0", 50)
	if d := recvD(t, s2); d.Event.Attrs.ID != "evt_s0_50" || d.Attempt != 1 || d.Sequence != 3 {
		t.Fatalf("new event after the redeliveries: %+v", d)
	}
	s2.Ack("evt_s0_50")
	s2.Close()
	pcs := committed(t, e, group)
	if pcs[0].Offset != 11 || pcs[1].Offset != 10 {
		t.Fatalf("committed %+v", pcs)
	}
}

// Without acks an event comes again with attempts 2..max, then goes to the
// dead-letter topic; a later event of its session is redelivered with it,
// after it; an acked later event is not.
func TestDurableRedeliveryBackoffDeadLetter(t *testing.T) {
	k, e := durableEnv(t, 1)
	const group = "g-redeliver"
	startDurable(t, e, group)
	clk := &testClock{}
	s := openDurableReq(t, e, DurableRequest{Group: group, clock: clk.now,
		Policy: AckPolicy{AckTimeout: time.Hour, MaxAttempts: 3, Backoff: time.Millisecond}})
	k.produce(0, "task.a", "s", 1)
	k.produce(0, "task.b", "s", 2)
	k.produce(0, "task.c", "s", 3)
	for i := range 3 {
		if d := recvD(t, s); d.Attempt != 1 {
			t.Fatalf("first delivery %d: %+v", i, d)
		}
	}
	s.Ack("evt_s_2")
	var got []string
	var dead []string
	for len(dead) < 2 {
		if s.Deliveries().Len() == 0 {
			clk.advance(time.Hour + time.Second) // every timer fires only when the test moves time
		}
		d := recvD(t, s)
		switch d.Kind {
		case DurableEvent:
			got = append(got, fmt.Sprintf("%s#%d", d.Event.Attrs.ID, d.Attempt))
		case DurableDeadLettered:
			dl := d.DeadLetter
			if dl == nil || dl.Attempts != 3 || dl.SubscriptionID != "sub_t" || !dl.Reason.Exhausted || string(d.Notice) != string(mustDeadLetterJSON(t, *dl)) {
				t.Fatalf("dead letter %+v notice %s", dl, d.Notice)
			}
			dead = append(dead, dl.Event.Attrs.ID)
		}
	}
	want := []string{"evt_s_1#2", "evt_s_3#2", "evt_s_1#3", "evt_s_3#3"}
	if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(dead) != "[evt_s_1 evt_s_3]" {
		t.Fatalf("redeliveries %v dead %v", got, dead)
	}
	if st := s.Stats(); st.Pending != 0 || st.DeadLettered != 2 || st.Redeliveries != 4 {
		t.Fatalf("stats %+v", st)
	}
	recs := readAll(t, k, partitioning.Naming{}.DeadLetter(testTenant), 2)
	if string(recs[0].Key) != "s" || !json.Valid(recs[0].Value) {
		t.Fatalf("dead-letter record %q %q", recs[0].Key, recs[0].Value)
	}
	gatewaytest.Poll(t, "commit past the dead-lettered events", func() bool { return committed(t, e, group)[0].Offset == 3 })
}

// A rejection is final: dead-lettered at once with the consumer's error.
func TestDurableRejectDeadLetters(t *testing.T) {
	k, e := durableEnv(t, 1)
	const group = "g-reject"
	startDurable(t, e, group)
	s := openDurable(t, e, group, AckPolicy{AckTimeout: time.Hour}, 0)
	k.produce(0, "task.a", "s", 1)
	recvD(t, s)
	if got := s.Reject("evt_s_1", Rejection{Code: "task_error", Message: "cannot"}); got != OutcomeRejected {
		t.Fatalf("reject: %s", got)
	}
	if got := s.Reject("evt_s_1", Rejection{Code: "task_error", Message: "again"}); got != OutcomeUnknown {
		t.Fatalf("second reject: %s", got)
	}
	d := recvD(t, s)
	if dl := d.DeadLetter; d.Kind != DurableDeadLettered || dl == nil || dl.Reason != (Rejection{Code: "task_error", Message: "cannot"}) || dl.Attempts != 1 {
		t.Fatalf("dead letter %+v notice %s", dl, d.Notice)
	}
	gatewaytest.Poll(t, "commit past the rejected event", func() bool { return committed(t, e, group)[0].Offset == 1 })
}

// A full window stops reading the partition; acks let it go on from where
// it stopped, losing nothing.
func TestDurableWindowBoundsReading(t *testing.T) {
	k, e := durableEnv(t, 1)
	const group = "g-window"
	startDurable(t, e, group)
	s := openDurable(t, e, group, AckPolicy{AckTimeout: time.Hour}, 64)
	for i := range 150 {
		k.produce(0, "task.x", "s", i)
	}
	seen := map[string]bool{}
	for range 64 {
		seen[recvD(t, s).Event.Attrs.ID] = true
	}
	gatewaytest.Poll(t, "64 pending", func() bool { return s.Stats().Pending == 64 })
	for len(seen) < 150 {
		for id := range seen {
			s.Ack(id)
		}
		d := recvD(t, s)
		if seen[d.Event.Attrs.ID] || d.Attempt != 1 {
			t.Fatalf("duplicate or redelivered %+v", d)
		}
		seen[d.Event.Attrs.ID] = true
		if s.Stats().Pending > 64 {
			t.Fatalf("pending %d over the window", s.Stats().Pending)
		}
	}
	for id := range seen {
		s.Ack(id)
	}
	gatewaytest.Poll(t, "all committed", func() bool { return committed(t, e, group)[0].Offset == 150 })
}

func readAll(t *testing.T, k *kafkaEnv, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.cluster.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s", len(out), n, topic)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func newAdm(t *testing.T, k *kafkaEnv) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// testClock is real time plus an offset the test moves.
type testClock struct{ off atomic.Int64 }

func (c *testClock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *testClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// ExpiresAt ends the stream with ErrExpired.
func TestDurableExpires(t *testing.T) {
	_, e := durableEnv(t, 1)
	const group = "g-expire"
	startDurable(t, e, group)
	clk := &testClock{}
	s := openDurableReq(t, e, DurableRequest{Group: group, clock: clk.now, ExpiresAt: time.Now().Add(time.Hour)})
	clk.advance(2 * time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, ok := s.Deliveries().Recv(ctx)
	if ctx.Err() != nil {
		t.Fatal("stream did not end")
	}
	if ok || !errors.Is(s.Err(), ErrExpired) {
		t.Fatalf("open %v, err %v", ok, s.Err())
	}
}

// testDeadLetterCodec is a dialect's dead-letter encoding, as a binding
// supplies it: the facts as JSON.
func testDeadLetterCodec(dl DeadLetter) ([]byte, error) {
	return json.Marshal(struct {
		ID, Sub  string
		Attempts int
		Reason   Rejection
		Original json.RawMessage
	}{dl.Event.Attrs.ID, dl.SubscriptionID, dl.Attempts, dl.Reason, dl.Event.Record.Value})
}

func mustDeadLetterJSON(t *testing.T, dl DeadLetter) []byte {
	t.Helper()
	b, err := testDeadLetterCodec(dl)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A consumer that rejects and leaves at once (aepctl consume --reject-types
// at its last event): the stream's end dead-letters the rejection it had
// not written yet, and the final commit covers it, so the subscription
// shows no lag with no holder; exactly one dead letter either way.
func TestDurableRejectThenCloseCommitsPastIt(t *testing.T) {
	k, e := durableEnv(t, 1)
	for i := range 8 {
		group := fmt.Sprintf("g-reject-close-%d", i)
		startDurable(t, e, group)
		s := openDurable(t, e, group, AckPolicy{AckTimeout: time.Hour}, 0)
		k.produce(0, "task.a", "s", 100+i)
		d := recvD(t, s)
		for d.Event.Attrs.ID != fmt.Sprintf("evt_s_%d", 100+i) { // the earlier rounds' events, acked
			s.Ack(d.Event.Attrs.ID)
			d = recvD(t, s)
		}
		if got := s.Reject(d.Event.Attrs.ID, Rejection{Code: "task_error", Message: "cannot"}); got != OutcomeRejected {
			t.Fatalf("reject: %s", got)
		}
		s.Close() // at once: the loop may not have written the dead letter
		if c := committed(t, e, group)[0].Offset; c != int64(i+1) {
			t.Fatalf("round %d: committed %d after the stream closed, want %d", i, c, i+1)
		}
	}
	readAll(t, k, partitioning.Naming{}.DeadLetter(testTenant), 8)
	time.Sleep(200 * time.Millisecond) // a second dead letter of any would be written by now
	ends, err := kadm.NewClient(k.prod).ListEndOffsets(context.Background(), partitioning.Naming{}.DeadLetter(testTenant))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	if n != 8 {
		t.Fatalf("%d dead letters for 8 rejections", n)
	}
}

// A retryable rejection is not final: the event comes again after the
// backoff with its next attempt, and once its attempts run out it is
// dead-lettered with the consumer's last error (not "not acknowledged").
func TestDurableRetryableRejectRedeliversThenDeadLetters(t *testing.T) {
	k, e := durableEnv(t, 1)
	const group = "g-retry"
	startDurable(t, e, group)
	pol := AckPolicy{AckTimeout: time.Hour, MaxAttempts: 3, Backoff: 50 * time.Millisecond, MaxBackoff: time.Second, BackoffMultiplier: 2}
	s := openDurable(t, e, group, pol, 0)
	k.produce(0, "task.a", "s", 1)
	k.produce(0, "task.a", "s", 2)
	first := recvD(t, s)
	if second := recvD(t, s); second.Event.Attrs.ID != "evt_s_2" {
		t.Fatalf("second delivery %+v", second)
	}
	if got := s.Ack("evt_s_2"); got != OutcomeApplied {
		t.Fatalf("ack: %s", got)
	}
	retry := Rejection{Code: "tool_timeout", Message: "try later", Retryable: true}
	for attempt := 2; attempt <= 3; attempt++ {
		if got := s.Reject(first.Event.Attrs.ID, retry); got != OutcomeRetry {
			t.Fatalf("retryable reject before attempt %d: %s", attempt, got)
		}
		d := recvD(t, s)
		if d.Kind != DurableEvent || d.Event.Attrs.ID != "evt_s_1" || d.Attempt != attempt {
			t.Fatalf("after a retryable rejection: %+v (want evt_s_1 attempt %d)", d, attempt)
		}
	}
	if got := s.Reject("evt_s_1", retry); got != OutcomeRetry {
		t.Fatalf("last retryable reject: %s", got)
	}
	d := recvD(t, s)
	want := Rejection{Code: "tool_timeout", Message: "try later", Exhausted: true}
	if dl := d.DeadLetter; d.Kind != DurableDeadLettered || dl == nil || dl.Reason != want || dl.Attempts != 3 {
		t.Fatalf("dead letter %+v (want %+v after 3 attempts)", dl, want)
	}
	if st := s.Stats(); st.Pending != 0 || st.DeadLettered != 1 || st.Redeliveries != 2 || st.Acked != 1 {
		t.Fatalf("stats %+v", st)
	}
	gatewaytest.Poll(t, "commit past both events", func() bool { return committed(t, e, group)[0].Offset == 2 })
}

// A retryable rejection posted on another node travels through the journal
// as retryable: the holder redelivers the event, and a holder that takes
// the subscription over after it does not treat it as final either.
func TestDurableRetryableRejectThroughTheJournal(t *testing.T) {
	k, eA := durableEnv(t, 1)
	eB := k.engine(nil)
	t.Cleanup(eB.Close)
	const group = "g-retry-journal"
	startDurable(t, eA, group)
	pol := AckPolicy{AckTimeout: time.Hour, MaxAttempts: 5}
	sA := openDurable(t, eA, group, pol, 0)
	k.produce(0, "task.a", "s", 1)
	if d := recvD(t, sA); d.Attempt != 1 {
		t.Fatalf("first delivery %+v", d)
	}
	ctx := context.Background()
	retry := []Rejection{{Code: "tool_timeout", Message: "later", Retryable: true}}
	if err := eB.JournalAcks(ctx, testTenantT, "sub_t", nil, retry, []string{"evt_s_1"}); err != nil {
		t.Fatal(err)
	}
	if d := recvD(t, sA); d.Kind != DurableEvent || d.Event.Attrs.ID != "evt_s_1" || d.Attempt != 2 {
		t.Fatalf("after a retryable rejection from the other node: %+v", d)
	}
	if err := eB.JournalAcks(ctx, testTenantT, "sub_t", nil, retry, []string{"evt_s_1"}); err != nil {
		t.Fatal(err)
	}
	sB := openDurable(t, eB, group, pol, 0)
	select {
	case <-sA.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the older stream was not fenced")
	}
	d := recvD(t, sB)
	if d.Kind != DurableEvent || d.Event.Attrs.ID != "evt_s_1" || d.Attempt < 3 {
		t.Fatalf("after the takeover: %+v (want evt_s_1 delivered again, attempt >= 3)", d)
	}
	if st := sB.Stats(); st.DeadLettered != 0 {
		t.Fatalf("the new holder dead-lettered a retryable rejection: %+v", st)
	}
}

// A consumer can reject an event before the transport confirms it wrote
// it (the client read the bytes; the writer's callback comes a moment
// later): the rejection is itself proof of one hand-over, so the dead
// letter counts 1 attempt, not 0, and the late confirmation adds nothing.
func TestDurableRejectBeforeTheWriteIsConfirmedCountsOneAttempt(t *testing.T) {
	k, e := durableEnv(t, 1)
	const group = "g-reject-early"
	startDurable(t, e, group)
	s := openDurable(t, e, group, AckPolicy{AckTimeout: time.Hour}, 0)
	k.produce(0, "task.a", "s", 1)
	d := recvQueued(t, s) // not confirmed yet
	if got := s.Reject("evt_s_1", Rejection{Code: "task_error", Message: "cannot"}); got != OutcomeRejected {
		t.Fatalf("reject: %s", got)
	}
	s.Handed(d) // the writer's confirmation, late
	dl := recvD(t, s)
	if dl.Kind != DurableDeadLettered || dl.DeadLetter == nil || dl.DeadLetter.Attempts != 1 {
		t.Fatalf("dead letter %+v (want 1 attempt)", dl.DeadLetter)
	}
}
