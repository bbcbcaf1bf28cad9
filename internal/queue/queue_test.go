package queue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestOfferNextInOrderGrowingLazily(t *testing.T) {
	q := New[int](100)
	if q.Allocated() != 0 {
		t.Fatalf("a new queue allocated %d slots", q.Allocated())
	}
	for i := range 100 {
		if !q.Offer(i) {
			t.Fatalf("offer %d refused below the bound", i)
		}
	}
	if q.Offer(100) {
		t.Fatal("offer past the bound accepted")
	}
	if q.Len() != 100 || q.Allocated() != 100 {
		t.Fatalf("len %d allocated %d, want 100 100", q.Len(), q.Allocated())
	}
	// Interleave so that the ring wraps before it grows again.
	for i := range 100 {
		v, ok, ended := q.Next()
		if !ok || ended || v != i {
			t.Fatalf("next = %d %v %v, want %d", v, ok, ended, i)
		}
	}
	if _, ok, ended := q.Next(); ok || ended {
		t.Fatalf("empty queue: ok %v ended %v", ok, ended)
	}
}

func TestRingWrapsThenGrowsKeepingOrder(t *testing.T) {
	q := New[int](64)
	next, want := 0, 0
	for range 5 {
		q.Offer(next)
		next++
	}
	for range 3 {
		v, _, _ := q.Next()
		if v != want {
			t.Fatalf("got %d want %d", v, want)
		}
		want++
	}
	for range 40 { // wraps the first 8-slot buffer, then grows twice
		if !q.Offer(next) {
			t.Fatal("refused")
		}
		next++
	}
	for want < next {
		v, ok, _ := q.Next()
		if !ok || v != want {
			t.Fatalf("got %d %v want %d", v, ok, want)
		}
		want++
	}
}

func TestEndDrainsThenReportsEnd(t *testing.T) {
	q := New[string](4)
	q.Offer("a")
	q.End()
	q.End()
	if q.Offer("b") {
		t.Fatal("offer after End accepted")
	}
	<-q.Ready()
	if v, ok, _ := q.Next(); !ok || v != "a" {
		t.Fatalf("got %q %v", v, ok)
	}
	if _, ok, ended := q.Next(); ok || !ended {
		t.Fatalf("after the last element: ok %v ended %v", ok, ended)
	}
	if err := q.Push(context.Background(), "c"); !errors.Is(err, ErrEnded) {
		t.Fatalf("push after End: %v", err)
	}
}

func TestPushWaitsForRoomAndHonoursContext(t *testing.T) {
	q := New[int](2)
	ctx := context.Background()
	if q.Push(ctx, 1) != nil || q.Push(ctx, 2) != nil {
		t.Fatal("push into room failed")
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := q.Push(short, 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("push into a full queue: %v", err)
	}
	pushed := make(chan error, 1)
	go func() { pushed <- q.Push(ctx, 3) }()
	if v, _ := q.Recv(ctx); v != 1 {
		t.Fatalf("recv %d", v)
	}
	if err := <-pushed; err != nil {
		t.Fatal(err)
	}
	if q.Len() != 2 {
		t.Fatalf("len %d", q.Len())
	}
}

// One producer pushing (blocking) and one offering (dropping when full)
// against one slow consumer: everything pushed arrives exactly once and in
// order, the consumer wakes for everything (no lost signal), and the queue
// never holds more than its bound.
func TestConcurrentProducersOneConsumer(t *testing.T) {
	q := New[[2]int](16)
	ctx := context.Background()
	const n = 20000
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			if err := q.Push(ctx, [2]int{0, i}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	offered := 0
	wg.Go(func() {
		for i := range n {
			if q.Offer([2]int{1, i}) {
				offered++
			}
		}
	})
	done := make(chan struct{})
	go func() { wg.Wait(); q.End(); close(done) }()
	next := [2]int{}
	got := [2]int{}
	for {
		if l := q.Len(); l > q.Cap() {
			t.Fatalf("len %d over the bound %d", l, q.Cap())
		}
		v, ok := q.Recv(ctx)
		if !ok {
			break
		}
		if v[1] < next[v[0]] {
			t.Fatalf("producer %d: %d after %d", v[0], v[1], next[v[0]])
		}
		next[v[0]] = v[1] + 1
		got[v[0]]++
	}
	<-done
	if got[0] != n || got[1] != offered {
		t.Fatalf("received %v, want %d pushed and %d offered", got, n, offered)
	}
}

func TestOnReadyCallsOnOfferAndEnd(t *testing.T) {
	q := New[int](2)
	q.Offer(1) // queued before the hook: OnReady calls it at once
	calls := 0
	q.OnReady(func() { calls++ })
	if calls != 1 {
		t.Fatalf("OnReady on a non-empty queue called fn %d times, want 1", calls)
	}
	q.Offer(2)
	if calls != 2 {
		t.Fatalf("after an Offer: %d calls, want 2", calls)
	}
	if q.Offer(3) || calls != 2 {
		t.Fatalf("a refused Offer called fn (%d calls)", calls)
	}
	q.End()
	if calls != 3 {
		t.Fatalf("after End: %d calls, want 3", calls)
	}
	for range 2 {
		if _, ok, _ := q.Next(); !ok {
			t.Fatal("queued element lost")
		}
	}
	if _, ok, ended := q.Next(); ok || !ended {
		t.Fatalf("after draining: ok %v ended %v, want the end", ok, ended)
	}
	q.OnReady(nil)
	q.End()
	if calls != 3 {
		t.Fatalf("fn called after OnReady(nil): %d calls", calls)
	}
	// the Ready channel still has its token for a goroutine consumer
	select {
	case <-q.Ready():
	default:
		t.Fatal("Ready lost its token while a hook was set")
	}
}

func TestOnReadyEmptyQueueWaits(t *testing.T) {
	q := New[string](4)
	calls := 0
	q.OnReady(func() { calls++ })
	if calls != 0 {
		t.Fatalf("OnReady on an empty queue called fn")
	}
	if err := q.Push(context.Background(), "a"); err != nil || calls != 1 {
		t.Fatalf("Push: %v, %d calls, want 1", err, calls)
	}
}

// OfferQuiet queues without a wake-up; one Wake tells of the whole run,
// through the hook and the Ready token alike. A refused OfferQuiet (full,
// ended) queues nothing.
func TestOfferQuietThenOneWake(t *testing.T) {
	q := New[int](3)
	ready := q.Ready() // made empty now: a later token is a wake-up's
	calls := 0
	q.OnReady(func() { calls++ })
	for i := range 3 {
		if !q.OfferQuiet(i) {
			t.Fatalf("OfferQuiet(%d) refused with room", i)
		}
	}
	if q.OfferQuiet(9) {
		t.Fatal("OfferQuiet on a full queue took the element")
	}
	select {
	case <-ready:
		t.Fatal("OfferQuiet left a Ready token")
	default:
	}
	if calls != 0 {
		t.Fatalf("OfferQuiet called the hook %d times", calls)
	}
	q.Wake()
	if calls != 1 {
		t.Fatalf("Wake called the hook %d times, want 1", calls)
	}
	select {
	case <-ready:
	default:
		t.Fatal("Wake left no Ready token")
	}
	for want := range 3 {
		if v, ok, _ := q.Next(); !ok || v != want {
			t.Fatalf("Next = %d %v, want %d", v, ok, want)
		}
	}
	q.End()
	if q.OfferQuiet(1) {
		t.Fatal("OfferQuiet after End took the element")
	}
}

// Trim gives the buffer back only when nothing is queued; the queue then
// works as a new one, order and bound included.
func TestTrim(t *testing.T) {
	q := New[int](4)
	if q.Trim() {
		t.Fatal("trimmed a queue that never allocated")
	}
	for i := range 3 {
		q.Offer(i)
	}
	if q.Trim() || q.Allocated() == 0 {
		t.Fatal("trimmed a queue holding elements")
	}
	for range 3 {
		q.Next()
	}
	if !q.Trim() || q.Allocated() != 0 {
		t.Fatalf("empty queue not trimmed: %d slots", q.Allocated())
	}
	for i := range 5 {
		if ok := q.Offer(10 + i); ok != (i < 4) {
			t.Fatalf("offer %d: %v", i, ok)
		}
	}
	for i := range 4 {
		if v, ok, _ := q.Next(); !ok || v != 10+i {
			t.Fatalf("next %d: %d %v", i, v, ok)
		}
	}
	q.Trim()
	q.End()
	if _, ok, ended := q.Next(); ok || !ended {
		t.Fatal("a trimmed queue that ended does not report its end")
	}
}

// The channels are made as a consumer or a waiting producer first needs
// them: Ready made after elements (or the end) were queued holds a token,
// and a producer waiting for room of a full queue is woken by the Next
// that frees a slot, or by End.
func TestLazyChannelsKeepTheirTokens(t *testing.T) {
	q := New[int](1)
	q.Offer(1)
	select {
	case <-q.Ready():
	default:
		t.Fatal("Ready made after an Offer holds no token")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pushed := make(chan error, 1)
	go func() { pushed <- q.Push(ctx, 2) }()
	time.Sleep(20 * time.Millisecond) // the push waits for room (or not yet: it then finds it)
	if v, ok, _ := q.Next(); !ok || v != 1 {
		t.Fatalf("next: %d %v", v, ok)
	}
	if err := <-pushed; err != nil {
		t.Fatalf("push after a freed slot: %v", err)
	}
	go func() { pushed <- q.Push(ctx, 3) }()
	time.Sleep(20 * time.Millisecond)
	q.End()
	if err := <-pushed; !errors.Is(err, ErrEnded) {
		t.Fatalf("push into an ended queue: %v", err)
	}
	q2 := New[int](1)
	q2.End()
	select {
	case <-q2.Ready():
	default:
		t.Fatal("Ready made after End holds no token")
	}
	if v, ok := q.Recv(ctx); !ok || v != 2 {
		t.Fatalf("recv: %d %v", v, ok)
	}
	if _, ok := q.Recv(ctx); ok {
		t.Fatal("recv after the end")
	}
}
