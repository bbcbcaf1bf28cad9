package durable

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// series is the value of name's series whose labels include want, and
// whether there is one.
func series(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) (float64, bool) {
	t.Helper()
	v, _, ok := gatewaytest.MetricSeries(t, reg, name, want)
	return v, ok
}

// The operator's metrics move with the traffic: a durable subscription's
// lag counts the records after its committed offsets and falls as acks are
// committed; a redelivery and a rejection count for the tenant; the live
// tail's lag is exported per tenant; per-subscription lag stays within its
// top-N cap.
func TestLagRedeliveryAndDeadLetterMetricsMove(t *testing.T) {
	k := newKafkaEnv(t, 2)
	if _, err := newAdm(t, k).CreateTopic(context.Background(), 2, 1, nil, partitioning.Naming{}.DeadLetter(testTenant)); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e := k.engine(func(c *Config) { c.Registerer, c.SubscriptionLagTop = reg, 1 })
	ten := map[string]string{"tenant": testTenant}
	get := func(name string, labels map[string]string) float64 {
		v, _ := series(t, reg, name, labels)
		return v
	}
	poll := func(what, name string, labels map[string]string, want float64) {
		t.Helper()
		var v float64
		var ok bool
		if !gatewaytest.Eventually(10*time.Second, 20*time.Millisecond, func() bool {
			v, ok = series(t, reg, name, labels)
			return ok && v == want
		}) {
			t.Fatalf("%s: %s%v = %v (present %v), want %v", what, name, labels, v, ok, want)
		}
	}

	const quiet, busy = "g-quiet", "g-busy"
	startDurable(t, e, quiet)
	startDurable(t, e, busy)
	// Both streams take every task.* event; the quiet one's consumer never
	// acknowledges (and its ack timeout is long), so its lag stays.
	// Two subscriptions: one stream per subscription, so a second stream
	// of the same one would fence the first.
	openDurableReq(t, e, DurableRequest{Group: quiet, SubscriptionID: "sub_quiet", Policy: AckPolicy{AckTimeout: time.Hour}})
	s := openDurableReq(t, e, DurableRequest{Group: busy, SubscriptionID: "sub_busy", Policy: AckPolicy{AckTimeout: 300 * time.Millisecond, MaxAttempts: 10, Backoff: time.Millisecond}})
	live, err := e.eng.(*engine.Engine).Subscribe(context.Background(), engine.Request{Tenant: testTenantT, Filter: mustFilter(t, "types=task.*")})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()

	k.produce(0, "task.a", "s", 1)
	k.produce(0, "task.b", "s", 2)
	k.produce(1, "task.c", "u", 3)
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, ok := live.Deliveries().Recv(ctx)
		cancel()
		if !ok {
			t.Fatalf("live subscription ended: %v", live.Err())
		}
	}
	poll("the tail dispatched everything", "aep_delivery_tail_lag_records", ten, 0)
	// Nothing acknowledged: 3 records after each group's commit, 6 for the
	// tenant; the one top-1 series says 3.
	poll("nothing acked", "aep_delivery_durable_lag_records", ten, 6)
	if v, ok := series(t, reg, "aep_delivery_subscription_lag_records", map[string]string{"tenant": testTenant}); !ok || v != 3 {
		t.Fatalf("subscription lag %v (present %v), want 3", v, ok)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "aep_delivery_subscription_lag_records" && len(mf.GetMetric()) != 1 {
			t.Fatalf("%d per-subscription series over a cap of 1", len(mf.GetMetric()))
		}
	}

	// Unacknowledged past the ack timeout: a redelivery, counted for the
	// tenant.
	for seen := 0; seen < 3; {
		d := recvD(t, s)
		if d.Attempt == 1 {
			seen++
		}
	}
	for d := recvD(t, s); d.Attempt < 2; d = recvD(t, s) {
	}
	if v := get("aep_delivery_redeliveries_total", ten); v < 1 {
		t.Fatalf("redeliveries{tenant=%s} = %v after a redelivery", testTenant, v)
	}

	// Acks commit the busy group forward: the tenant's lag falls by the
	// two acked events, then a rejection dead-letters the third and only
	// the quiet group's 3 are left.
	s.Ack("evt_s_1")
	s.Ack("evt_s_2")
	poll("two acked", "aep_delivery_durable_lag_records", ten, 4)
	if got := s.Reject("evt_u_3", Rejection{Code: "task_error", Message: "no"}); got != OutcomeRejected {
		t.Fatalf("reject: %s", got)
	}
	poll("rejected", "aep_delivery_dead_letters_total", ten, 1)
	poll("busy settled", "aep_delivery_durable_lag_records", ten, 3)
	// The top-1 series is the most lagging subscription, the quiet one.
	poll("top-1", "aep_delivery_subscription_lag_records", map[string]string{"subscription": quiet}, 3)
	if _, ok := series(t, reg, "aep_delivery_subscription_lag_records", map[string]string{"subscription": busy}); ok {
		t.Fatal("the less lagging subscription has a series over a cap of 1")
	}
}
