// Package queue is the bounded queue between a producer and one consumer
// that a delivery stream uses (the engine's subscriptions, the SSE write
// loop): like a buffered channel, but its buffer is allocated as it fills,
// so a stream that stays idle holds a few hundred bytes instead of its
// whole capacity.
//
// Concurrency: any number of goroutines may Offer, Push and End; one
// consumer calls Next (Ready tells it when to look, or the OnReady
// callback, for a consumer that holds no goroutine while idle). All methods are safe
// for concurrent use.
package queue

import (
	"context"
	"errors"
	"iter"
	"sync"
)

// ErrEnded is returned by Push and WaitRoom once the queue has ended.
var ErrEnded = errors.New("queue: ended")

// minGrow is the first buffer's length, in elements.
const minGrow = 8

// Queue is a bounded FIFO of T. The zero value is not usable; call New.
type Queue[T any] struct {
	max int

	mu sync.Mutex
	// ready holds a token when Next may have something new; made by the
	// first Ready (a consumer on OnReady never needs it). room holds a
	// token when a Next freed a slot of a full queue; made by the first
	// WaitRoom that finds the queue full. Both are guarded by mu (a nil
	// one is not signalled): an idle stream's two queues hold no channel.
	ready  chan struct{}
	room   chan struct{}
	buf    []T // ring; len(buf) is the capacity allocated so far (≤ max); guarded by mu
	head   int // guarded by mu
	n      int // elements queued; guarded by mu
	ended  bool
	notify func() // called where ready is signalled, when set; guarded by mu
}

// New returns an empty queue that holds at most size elements (at least
// 1). Nothing of the buffer is allocated until the first Offer.
func New[T any](size int) *Queue[T] {
	return &Queue[T]{max: max(size, 1)}
}

// Offer queues v unless the queue is full or ended; it never blocks.
func (q *Queue[T]) Offer(v T) bool {
	ok, fn, ready := q.offer(v)
	if ok {
		signal(ready)
		if fn != nil {
			fn()
		}
	}
	return ok
}

// OfferQuiet queues v as Offer does but wakes no one: the caller queues a
// run of elements, then calls Wake once, so that a consumer woken by the
// first does not take them one at a time (a parked stream would write
// each on its own).
func (q *Queue[T]) OfferQuiet(v T) bool {
	ok, _, _ := q.offer(v)
	return ok
}

// Wake tells the consumer to look (Ready's token and the OnReady hook),
// as Offer does after queueing. Harmless when nothing is queued.
func (q *Queue[T]) Wake() {
	q.mu.Lock()
	fn, ready := q.notify, q.ready
	q.mu.Unlock()
	signal(ready)
	if fn != nil {
		fn()
	}
}

// offer queues v and returns the OnReady hook to call and the Ready
// channel to signal (nil while no consumer asked for it).
func (q *Queue[T]) offer(v T) (bool, func(), chan struct{}) {
	q.mu.Lock()
	if q.ended || q.n == q.max {
		q.mu.Unlock()
		return false, nil, nil
	}
	if q.n == len(q.buf) {
		q.growLocked()
	}
	q.buf[(q.head+q.n)%len(q.buf)] = v
	q.n++
	fn, ready := q.notify, q.ready
	q.mu.Unlock()
	return true, fn, ready
}

// Push queues v, waiting for room; it returns ctx.Err() when ctx ends
// first, and ErrEnded once the queue has ended.
func (q *Queue[T]) Push(ctx context.Context, v T) error {
	for {
		if q.Offer(v) {
			return nil
		}
		if err := q.WaitRoom(ctx); err != nil {
			return err
		}
	}
}

// WaitRoom waits until the queue has room for one element (it stays there
// while no other goroutine queues), ctx ends, or the queue ends.
func (q *Queue[T]) WaitRoom(ctx context.Context) error {
	for {
		q.mu.Lock()
		full, ended := q.n == q.max, q.ended
		if full && !ended && q.room == nil {
			q.room = make(chan struct{}, 1) // a Next that frees a slot from now on signals it
		}
		room := q.room
		q.mu.Unlock()
		if ended {
			return ErrEnded
		}
		if !full {
			return nil
		}
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// growLocked doubles the buffer (from minGrow, up to max), keeping the
// order. Must hold q.mu.
func (q *Queue[T]) growLocked() {
	size := min(max(2*len(q.buf), minGrow), q.max)
	buf := make([]T, size)
	for i := range q.n {
		buf[i] = q.buf[(q.head+i)%len(q.buf)]
	}
	q.buf, q.head = buf, 0
}

// Trim gives the buffer back when nothing is queued, so that a stream
// found idle (a connection's heartbeat) holds none; the next Offer
// allocates it again. It reports whether a buffer was dropped. Safe from
// any goroutine.
func (q *Queue[T]) Trim() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n > 0 || q.buf == nil {
		return false
	}
	q.buf, q.head = nil, 0
	return true
}

// End ends the queue: what is queued is still returned by Next, then Next
// reports the end. Offer and Push fail from now on. Idempotent.
func (q *Queue[T]) End() {
	q.mu.Lock()
	q.ended = true
	fn, ready, room := q.notify, q.ready, q.room
	q.mu.Unlock()
	signal(ready)
	signal(room)
	if fn != nil {
		fn()
	}
}

// OnReady sets fn to be called, from the goroutine that queues (Offer,
// Push) or ends the queue, after each element queued and after End: a
// consumer that parks instead of waiting on Ready learns of new work
// there, then calls Next until it reports nothing. fn must not block. When
// the queue already holds elements or has ended, fn is also called once
// before OnReady returns, so nothing queued earlier is missed. Nil stops
// the calls. Ready keeps receiving its tokens either way.
func (q *Queue[T]) OnReady(fn func()) {
	q.mu.Lock()
	q.notify = fn
	pending := q.n > 0 || q.ended
	q.mu.Unlock()
	if fn != nil && pending {
		fn()
	}
}

// Ready receives a token when Next may return an element or the end: the
// consumer waits on it, then calls Next until it reports nothing. The
// channel is made by the first call (holding a token when elements or the
// end are pending); it is the same channel from then on.
func (q *Queue[T]) Ready() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ready == nil {
		q.ready = make(chan struct{}, 1)
		if q.n > 0 || q.ended {
			q.ready <- struct{}{}
		}
	}
	return q.ready
}

// Next removes and returns the oldest element (ok). With ok false, ended
// reports whether the queue has ended and is empty: nothing will ever come
// again. One consumer only.
func (q *Queue[T]) Next() (v T, ok, ended bool) {
	q.mu.Lock()
	if q.n == 0 {
		ended = q.ended
		q.mu.Unlock()
		return v, false, ended
	}
	var zero T
	v, q.buf[q.head] = q.buf[q.head], zero
	q.head = (q.head + 1) % len(q.buf)
	wasFull := q.n == q.max
	q.n--
	more := q.n > 0 || q.ended // after the last one, a token to see the end
	ready, room := q.ready, q.room
	q.mu.Unlock()
	if wasFull {
		signal(room)
	}
	if more {
		signal(ready)
	}
	return v, true, false
}

// Recv waits for the next element: false when the queue has ended and is
// empty, or ctx ended first. One consumer only.
func (q *Queue[T]) Recv(ctx context.Context) (T, bool) {
	for {
		if v, ok, ended := q.Next(); ok || ended {
			return v, ok
		}
		select {
		case <-q.Ready():
		case <-ctx.Done():
			var zero T
			return zero, false
		}
	}
}

// All yields the elements as they come until the queue has ended and is
// empty: ranging over it is ranging over a channel until it is closed. One
// consumer only.
func (q *Queue[T]) All() iter.Seq[T] {
	return func(yield func(T) bool) {
		for {
			v, ok := q.Recv(context.Background())
			if !ok || !yield(v) {
				return
			}
		}
	}
}

// Len is the number of elements queued.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// Cap is the most elements the queue holds.
func (q *Queue[T]) Cap() int { return q.max }

// Allocated is the number of elements the buffer has room for now.
func (q *Queue[T]) Allocated() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.buf)
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
