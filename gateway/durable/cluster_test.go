package durable

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// Cluster.Close owns what the cluster started: it ends an open stream
// (ErrClosed) and the tenant's journal follower, waits for them, may be
// called again, and refuses new streams afterwards. The
// engine under it keeps running.
func TestClusterCloseEndsItsGoroutinesAndIsIdempotent(t *testing.T) {
	k, e := durableEnv(t, 1)
	startDurable(t, e, "g1")
	s := openDurable(t, e, "g1", AckPolicy{}, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k.produce(0, "task.a", "s", 1)
	if d := recvD(t, s); d.Event == nil || d.Event.Attrs.ID != "evt_s_1" {
		t.Fatalf("first delivery %+v", d)
	}

	closed := make(chan struct{})
	go func() { e.Close(); close(closed) }()
	if !gatewaytest.Eventually(10*time.Second, 10*time.Millisecond, func() bool {
		select {
		case <-closed:
			return true
		default:
			return false
		}
	}) {
		t.Fatal("Close did not return: a goroutine of the cluster outlived it")
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("the stream is not done after Close returned")
	}
	if err := s.Err(); !errors.Is(err, ErrClosed) {
		t.Fatalf("stream ended with %v, want ErrClosed", err)
	}
	e.Close() // idempotent: returns at once, no panic
	if _, err := e.OpenDurable(ctx, DurableRequest{Tenant: testTenantT, SubscriptionID: "sub_t2", Group: "g2",
		Filter: mustFilter(t, "types=task.*"), DeadLetter: testDeadLetterCodec}); !errors.Is(err, ErrClosed) {
		t.Fatalf("OpenDurable after Close: %v, want ErrClosed", err)
	}
	// The engine is not the cluster's: it still serves its topic state.
	if _, err := e.eng.State(ctx, testTenantT); err != nil {
		t.Fatalf("engine after the cluster closed: %v", err)
	}
}
