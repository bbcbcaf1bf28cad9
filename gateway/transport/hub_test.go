package transport_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

func TestHubCapsEachTenant(t *testing.T) {
	h := transport.NewHub(2)
	a1, err := h.Enter("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Enter("a", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Enter("a", nil); !errors.Is(err, transport.ErrTenantLimit) {
		t.Fatalf("third stream of a: %v, want ErrTenantLimit", err)
	}
	if _, err := h.Enter("b", nil); err != nil {
		t.Fatalf("another tenant is not capped by a's streams: %v", err)
	}
	a1.Leave()
	a1.Leave() // idempotent: frees one place, not two
	if got := h.Open("a"); got != 1 {
		t.Fatalf("open streams of a = %d, want 1", got)
	}
	if _, err := h.Enter("a", nil); err != nil {
		t.Fatalf("a stream that left frees its place: %v", err)
	}
	if _, err := h.Enter("a", nil); !errors.Is(err, transport.ErrTenantLimit) {
		t.Fatalf("over the cap again: %v", err)
	}
}

func TestHubShutdownEndsEveryStreamAndWaits(t *testing.T) {
	h := transport.NewHub(0)
	var told atomic.Int32
	streams := make([]*transport.Stream, 3)
	for i := range streams {
		s, err := h.Enter("a", func() { told.Add(1) })
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = s
	}
	done := make(chan error, 1)
	go func() { done <- h.Shutdown(context.Background()) }()
	select {
	case <-h.ShuttingDown():
	case <-time.After(10 * time.Second):
		t.Fatal("ShuttingDown not closed")
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v before the streams left", err)
	case <-time.After(20 * time.Millisecond):
	}
	for _, s := range streams {
		s.Leave()
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if told.Load() != 3 {
		t.Fatalf("%d streams told to end, want 3", told.Load())
	}
	if _, err := h.Enter("a", nil); !errors.Is(err, transport.ErrShuttingDown) {
		t.Fatalf("Enter after Shutdown: %v, want ErrShuttingDown", err)
	}
	if err := h.Shutdown(context.Background()); err != nil || told.Load() != 3 {
		t.Fatalf("second Shutdown: %v, told %d (must not tell again)", err, told.Load())
	}
}

func TestHubShutdownIsBoundedByItsContext(t *testing.T) {
	h := transport.NewHub(0)
	s, err := h.Enter("a", nil) // never leaves in time
	if err != nil {
		t.Fatal(err)
	}
	defer s.Leave()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := h.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want the context's error", err)
	}
}

// Refusals count by reason: over the tenant's cap, and after Shutdown.
func TestHubCountsRefusals(t *testing.T) {
	h := transport.NewHub(1)
	s, err := h.Enter("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := h.Enter("a", nil); !errors.Is(err, transport.ErrTenantLimit) {
			t.Fatalf("over the cap: %v", err)
		}
	}
	s.Leave()
	if err := h.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Enter("b", nil); !errors.Is(err, transport.ErrShuttingDown) {
		t.Fatalf("after shutdown: %v", err)
	}
	if limit, shut := h.Refusals(); limit != 2 || shut != 1 {
		t.Fatalf("refusals: tenant-limit %d, shutting-down %d; want 2 and 1", limit, shut)
	}
}
