package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/ingest"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// writer is a Func whose calls the test holds and releases: every call is
// recorded, announced on called, and waits for a token on release (when
// hold is set).
type writer struct {
	mu       sync.Mutex
	calls    [][]string
	called   chan int
	hold     bool
	released chan struct{}
	answer   func(events [][]byte) []ingest.Result // nil: every event accepted
}

func newWriter(hold bool) *writer {
	return &writer{called: make(chan int, 100), hold: hold, released: make(chan struct{}, 100)}
}

func (w *writer) write(_ context.Context, _ tenant.Tenant, events [][]byte) []ingest.Result {
	names := make([]string, len(events))
	for i, e := range events {
		names[i] = string(e)
	}
	w.mu.Lock()
	w.calls = append(w.calls, names)
	n := len(w.calls)
	w.mu.Unlock()
	w.called <- n
	if w.hold {
		<-w.released
	}
	if w.answer != nil {
		return w.answer(events)
	}
	return make([]ingest.Result, len(events))
}

func (w *writer) release() { w.released <- struct{}{} }
func (w *writer) recorded() [][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.calls)
}

// outcomes collects what Done reports, in order.
type outcomes struct {
	mu  sync.Mutex
	ids []string
	res []ingest.Result
}

func (o *outcomes) done(id string, r *ingest.Result) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ids = append(o.ids, id)
	o.res = append(o.res, *r)
}

func (o *outcomes) got() ([]string, []ingest.Result) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.ids), slices.Clone(o.res)
}

func newPipe(w *writer, o *outcomes, mod func(*ingest.PipeConfig)) *ingest.Pipe {
	cfg := ingest.PipeConfig{Func: w.write, Tenant: tenant.MustParse("acme"), Done: o.done}
	if mod != nil {
		mod(&cfg)
	}
	return ingest.NewPipe(cfg)
}

func submit(t *testing.T, p *ingest.Pipe, names ...string) {
	t.Helper()
	for _, n := range names {
		if !p.Submit([]byte(n), n) {
			t.Fatalf("Submit(%s) refused", n)
		}
	}
}

// returns reports whether f returns within d, running it on a goroutine
// whose end the caller can still wait for on the channel.
func returns(f func(), d time.Duration) (bool, chan struct{}) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return true, done
	case <-time.After(d):
		return false, done
	}
}

func TestPipeBatchesWhatArrivesWhileAWriteIsInFlight(t *testing.T) {
	w, o := newWriter(true), &outcomes{}
	p := newPipe(w, o, nil)
	defer p.Close()
	submit(t, p, "e1")
	<-w.called // e1's write is in flight
	submit(t, p, "e2", "e3", "e4", "e5")
	w.release()
	<-w.called
	w.release()
	p.Drain()
	if got, want := w.recorded(), [][]string{{"e1"}, {"e2", "e3", "e4", "e5"}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("writes %v, want %v", got, want)
	}
	if ids, _ := o.got(); !slices.Equal(ids, []string{"e1", "e2", "e3", "e4", "e5"}) {
		t.Fatalf("answered %v, want every event once in order", ids)
	}
}

func TestPipeSubmitWaitsForRoom(t *testing.T) {
	w, o := newWriter(true), &outcomes{}
	p := newPipe(w, o, func(c *ingest.PipeConfig) { c.MaxEvents = 2 })
	defer p.Close()
	submit(t, p, "e1")
	<-w.called
	submit(t, p, "e2", "e3") // the queue behind e1's write is full
	ok, done := returns(func() { submit(t, p, "e4") }, 100*time.Millisecond)
	if ok {
		t.Fatal("Submit returned with the queue full")
	}
	w.release() // e1 written: the worker takes e2, e3 and makes room
	<-done
	for range 2 {
		<-w.called
		w.release()
	}
	p.Drain()
	if got, want := w.recorded(), [][]string{{"e1"}, {"e2", "e3"}, {"e4"}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("writes %v, want %v", got, want)
	}
}

func TestPipeBoundsBytesButTakesOneEventOfAnySize(t *testing.T) {
	w, o := newWriter(true), &outcomes{}
	p := newPipe(w, o, func(c *ingest.PipeConfig) { c.MaxBytes = 10 })
	defer p.Close()
	submit(t, p, "e1")
	<-w.called
	big := strings.Repeat("x", 100)
	submit(t, p, big) // over the bound, but alone
	ok, done := returns(func() { submit(t, p, "e3") }, 100*time.Millisecond)
	if ok {
		t.Fatal("Submit returned with the queue over its byte bound")
	}
	w.release()
	<-done
	for range 2 {
		<-w.called
		w.release()
	}
	p.Drain()
	if got, want := w.recorded(), [][]string{{"e1"}, {big}, {"e3"}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("writes %v, want %v", got, want)
	}
}

func TestPipeCloseWritesEverythingSubmittedAndRefusesMore(t *testing.T) {
	w, o := newWriter(true), &outcomes{}
	p := newPipe(w, o, nil)
	submit(t, p, "e1")
	<-w.called
	submit(t, p, "e2", "e3")
	ok, closed := returns(p.Close, 100*time.Millisecond)
	if ok {
		t.Fatal("Close returned while a write was in flight")
	}
	if p.Submit([]byte("late"), "late") {
		t.Fatal("Submit taken by a closing pipe")
	}
	w.release()
	<-w.called
	w.release()
	<-closed
	if ids, _ := o.got(); !slices.Equal(ids, []string{"e1", "e2", "e3"}) {
		t.Fatalf("answered %v, want e1 e2 e3 (everything submitted before Close)", ids)
	}
	if ok, _ := returns(p.Close, 5*time.Second); !ok {
		t.Fatal("a second Close did not return")
	}
}

func TestPipeCloseReleasesASubmitWaitingForRoom(t *testing.T) {
	w, o := newWriter(true), &outcomes{}
	p := newPipe(w, o, func(c *ingest.PipeConfig) { c.MaxEvents = 1 })
	submit(t, p, "e1")
	<-w.called
	submit(t, p, "e2")
	var taken bool
	ok, waiting := returns(func() { taken = p.Submit([]byte("e3"), "e3") }, 100*time.Millisecond)
	if ok {
		t.Fatal("Submit returned with the queue full")
	}
	_, closed := returns(p.Close, 0)
	<-waiting // Close refuses it before the write in flight ends
	if taken {
		t.Fatal("the waiting Submit was taken by a closing pipe")
	}
	w.release()
	<-w.called
	w.release()
	<-closed
	if ids, _ := o.got(); !slices.Equal(ids, []string{"e1", "e2"}) {
		t.Fatalf("answered %v, want e1 e2", ids)
	}
}

func TestPipeDrainWaitsForTheAnswers(t *testing.T) {
	w, o := newWriter(true), &outcomes{}
	p := newPipe(w, o, nil)
	defer p.Close()
	if ok, _ := returns(p.Drain, 5*time.Second); !ok {
		t.Fatal("Drain of an idle pipe did not return")
	}
	submit(t, p, "e1")
	<-w.called
	ok, drained := returns(p.Drain, 100*time.Millisecond)
	if ok {
		t.Fatal("Drain returned before e1 was answered")
	}
	w.release()
	<-drained
	if ids, _ := o.got(); !slices.Equal(ids, []string{"e1"}) {
		t.Fatalf("answered %v after Drain, want e1", ids)
	}
}

func TestPipeFailsTheEventsOfAWriteThatPanicsOrAnswersShort(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func([][]byte) []ingest.Result
	}{
		{"panic", func([][]byte) []ingest.Result { panic("bug") }},
		{"short", func([][]byte) []ingest.Result { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, o := newWriter(false), &outcomes{}
			calls := 0
			w.answer = func(events [][]byte) []ingest.Result {
				if calls++; calls == 1 {
					return tc.answer(events)
				}
				return make([]ingest.Result, len(events))
			}
			p := newPipe(w, o, nil)
			defer p.Close()
			submit(t, p, "e1")
			p.Drain()
			submit(t, p, "e2")
			p.Drain()
			ids, res := o.got()
			if !slices.Equal(ids, []string{"e1", "e2"}) {
				t.Fatalf("answered %v, want e1 e2", ids)
			}
			if !errors.Is(res[0].WriteErr, ingest.ErrPipe) || res[0].Accepted() {
				t.Fatalf("e1: %+v, want failed with ErrPipe", res[0])
			}
			if !res[1].Accepted() {
				t.Fatalf("e2 after the failed write: %+v, want accepted", res[1])
			}
		})
	}
}

// A connection that is ending starts no goroutine: the events are written
// on the submitter's.
func TestPipeWritesOnTheSubmitterWhenGoRefuses(t *testing.T) {
	w, o := newWriter(false), &outcomes{}
	p := newPipe(w, o, func(c *ingest.PipeConfig) { c.Go = func(func()) bool { return false } })
	defer p.Close()
	submit(t, p, "e1")
	if ids, _ := o.got(); !slices.Equal(ids, []string{"e1"}) {
		t.Fatalf("answered %v when Submit returned, want e1", ids)
	}
}

// Many events from one submitter, written while the writes take their
// time: every event once, in order, in fewer writes than events.
func TestPipeKeepsOrderUnderLoad(t *testing.T) {
	w, o := newWriter(false), &outcomes{}
	w.answer = func(events [][]byte) []ingest.Result {
		time.Sleep(time.Millisecond)
		return make([]ingest.Result, len(events))
	}
	w.called = make(chan int, 10_000)
	p := newPipe(w, o, func(c *ingest.PipeConfig) { c.MaxEvents = 8 })
	var want []string
	for i := range 500 {
		n := fmt.Sprintf("e%d", i)
		want = append(want, n)
		submit(t, p, n)
	}
	p.Close()
	ids, _ := o.got()
	if !slices.Equal(ids, want) {
		t.Fatalf("answered %d events out of order or twice", len(ids))
	}
	calls := w.recorded()
	for _, c := range calls {
		if len(c) > 8 {
			t.Fatalf("a write of %d events, over MaxEvents 8", len(c))
		}
	}
	if len(calls) >= 500 {
		t.Fatalf("%d writes for 500 events: nothing was batched", len(calls))
	}
}

// A connection that never emitted holds no Pipe: draining or closing it
// is nothing to wait for.
func TestNilPipeDrainsAndClosesAtOnce(t *testing.T) {
	var p *ingest.Pipe
	if ok, _ := returns(func() { p.Drain(); p.Close() }, 5*time.Second); !ok {
		t.Fatal("a nil Pipe's Drain or Close did not return")
	}
}

// A Done that panics (a binding's bug) is logged and handed to Panicked;
// the process and the pipe go on, the next event is reported.
func TestPipeDonePanicIsRecovered(t *testing.T) {
	w, o := newWriter(false), &outcomes{}
	panicked := make(chan struct{}, 1)
	p := newPipe(w, o, func(c *ingest.PipeConfig) {
		c.Done = func(id string, r *ingest.Result) {
			if id == "e1" {
				panic("bug")
			}
			o.done(id, r)
		}
		c.Panicked = func() { panicked <- struct{}{} }
	})
	defer p.Close()
	submit(t, p, "e1", "e2")
	p.Drain()
	select {
	case <-panicked:
	default:
		t.Fatal("Panicked not called")
	}
	if ids, _ := o.got(); !slices.Equal(ids, []string{"e2"}) {
		t.Fatalf("reported %v after the panic, want e2", ids)
	}
}
