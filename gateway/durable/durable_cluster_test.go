package durable

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// Two engines on one Kafka are two nodes: acks and a rejection posted on
// the node that does not hold the stream are applied by the holder; a
// stream opened on the other node takes over (the newest wins), fences
// the first one, and delivers exactly the unacknowledged events again,
// each marked as attempt 2; the remote rejection dead-letters.
func TestDurableTakeoverAcrossEngines(t *testing.T) {
	k, eA := durableEnv(t, 2)
	eB := k.engine(nil)
	t.Cleanup(eB.Close)
	const group = "g-cluster"
	startDurable(t, eA, group)
	long := AckPolicy{AckTimeout: time.Hour}
	sA := openDurable(t, eA, group, long, 0)
	for i := range 10 {
		k.produce(int32(i%2), "task.updated", fmt.Sprintf("s%d", i%2), i)
	}
	var ids []string
	for range 10 {
		d := recvD(t, sA)
		if d.Attempt != 1 {
			t.Fatalf("first delivery %+v", d)
		}
		ids = append(ids, d.Event.Attrs.ID)
	}
	ctx := context.Background()
	if err := eB.JournalAcks(ctx, testTenantT, "sub_t", ids[:4], nil, nil); err != nil {
		t.Fatal(err)
	}
	gatewaytest.Poll(t, "the holder to apply acks posted on the other node", func() bool { return sA.Stats().Acked == 4 })

	sB := openDurable(t, eB, group, long, 0)
	select {
	case <-sA.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the older stream was not fenced")
	}
	if !errors.Is(sA.Err(), ErrTakenOver) {
		t.Fatalf("older stream ended with %v", sA.Err())
	}
	if sB.Epoch() <= sA.Epoch() {
		t.Fatalf("epochs %d then %d", sA.Epoch(), sB.Epoch())
	}
	want := map[string]bool{}
	for _, id := range ids[4:] {
		want[id] = true
	}
	for range 6 {
		d := recvD(t, sB)
		if !want[d.Event.Attrs.ID] || d.Attempt != 2 {
			t.Fatalf("after the takeover: %s attempt %d (want one of %v, attempt 2)", d.Event.Attrs.ID, d.Attempt, want)
		}
		delete(want, d.Event.Attrs.ID)
	}
	if err := eA.JournalAcks(ctx, testTenantT, "sub_t", ids[4:9], []Rejection{{Code: "task_error", Message: "no"}}, ids[9:]); err != nil {
		t.Fatal(err)
	}
	if d := recvD(t, sB); d.Kind != DurableDeadLettered || d.Event.Attrs.ID != ids[9] || d.DeadLetter.Reason.Code != "task_error" {
		t.Fatalf("remote rejection: %+v", d)
	}
	gatewaytest.Poll(t, "every event settled", func() bool { st := sB.Stats(); return st.Pending == 0 && st.Acked == 5 })
}

// The janitor tombstones an expired definition and deletes the consumer
// group of every deleted subscription, on a node that follows the tenant.
func TestDurableJanitor(t *testing.T) {
	old := JanitorInterval
	JanitorInterval = 100 * time.Millisecond
	t.Cleanup(func() { JanitorInterval = old })
	k, e := durableEnv(t, 1)
	ctx := context.Background()
	if _, err := newAdm(t, k).CreateTopic(ctx, 1, 1, nil, partitioning.Naming{}.Subscriptions(testTenant)); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Minute)
	for _, def := range []SubscriptionDef{{ID: "sub_expired", ExpiresAt: &past}, {ID: "sub_deleted"}, {ID: "sub_live"}} {
		if err := e.PutSubscription(ctx, testTenantT, def); err != nil {
			t.Fatal(err)
		}
		startDurable(t, e, SubscriptionGroup(testTenantT, def.ID))
	}
	if _, err := e.Subscriptions(ctx, testTenantT); err != nil { // starts the follower and its janitor
		t.Fatal(err)
	}
	if err := e.writeDef(ctx, testTenantT, "sub_deleted", nil); err != nil { // a tombstone; the group is left
		t.Fatal(err)
	}
	groupGone := func(id string) bool {
		_, _, found, err := fetchDurable(ctx, e.adm, SubscriptionGroup(testTenantT, id), e.cfg.Naming.Events(testTenant))
		return err == nil && !found
	}
	gatewaytest.Poll(t, "the janitor to remove the expired and deleted subscriptions", func() bool {
		defs, err := e.Subscriptions(ctx, testTenantT)
		_, expired := defs["sub_expired"]
		return err == nil && !expired && groupGone("sub_expired") && groupGone("sub_deleted")
	})
	if defs, _ := e.Subscriptions(ctx, testTenantT); len(defs) != 1 || groupGone("sub_live") {
		t.Fatalf("the live subscription was touched: %v", defs)
	}
}

// Deleting a subscription on one node ends its stream held on another.
func TestDurableDeleteEndsStreamOnOtherNode(t *testing.T) {
	k, eA := durableEnv(t, 1)
	eB := k.engine(nil)
	t.Cleanup(eB.Close)
	ctx := context.Background()
	if _, err := newAdm(t, k).CreateTopic(ctx, 1, 1, nil, partitioning.Naming{}.Subscriptions(testTenant)); err != nil {
		t.Fatal(err)
	}
	if err := eA.PutSubscription(ctx, testTenantT, SubscriptionDef{ID: "sub_t"}); err != nil {
		t.Fatal(err)
	}
	group := SubscriptionGroup(testTenantT, "sub_t")
	startDurable(t, eA, group)
	if _, err := eA.Subscriptions(ctx, testTenantT); err != nil { // node A follows the definitions
		t.Fatal(err)
	}
	s := openDurable(t, eA, group, AckPolicy{}, 0)
	if err := eB.DeleteSubscription(ctx, testTenantT, "sub_t"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the stream outlived its subscription")
	}
	if !errors.Is(s.Err(), ErrDeleted) {
		t.Fatalf("ended with %v", s.Err())
	}
}
