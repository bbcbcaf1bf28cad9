package gopool

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A task never waits behind a running one, however long that one blocks.
func TestTaskNeverWaitsBehindABlockedOne(t *testing.T) {
	p := New(4, time.Minute)
	defer p.Close()
	block := make(chan struct{})
	p.Go(func() { <-block })
	done := make(chan struct{})
	p.Go(func() { close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the second task waited behind the blocked one")
	}
	close(block)
}

// A finished goroutine takes the next task; past the linger it exits, so
// an idle pool holds none.
func TestIdleGoroutinesAreReusedThenExit(t *testing.T) {
	p := New(4, 200*time.Millisecond)
	defer p.Close()
	ran := make(chan struct{}, 1)
	p.Go(func() { ran <- struct{}{} })
	<-ran
	waitFor(t, func() bool { return p.Idle() == 1 }, "one idle goroutine after the first task")
	before := runtime.NumGoroutine()
	p.Go(func() { ran <- struct{}{} })
	<-ran
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("goroutines %d after a second task, %d before: want the idle one reused", n, before)
	}
	waitFor(t, func() bool { return p.Idle() == 0 }, "no idle goroutine after the linger")
}

// At most maxIdle goroutines wait; the others of a burst exit.
func TestIdleIsBounded(t *testing.T) {
	p := New(3, time.Minute)
	defer p.Close()
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 10 {
		wg.Add(1)
		p.Go(func() { defer wg.Done(); <-release })
	}
	close(release)
	wg.Wait()
	waitFor(t, func() bool { return p.Idle() == 3 }, "3 idle goroutines")
	time.Sleep(50 * time.Millisecond)
	if n := p.Idle(); n != 3 {
		t.Fatalf("%d idle, want 3", n)
	}
}

// Tasks handed over while idle goroutines' lingers run out (the race
// between the timer and Go) each run exactly once.
func TestEveryTaskRunsOnceWhileLingersExpire(t *testing.T) {
	p := New(8, time.Microsecond)
	var ran atomic.Int64
	var wg sync.WaitGroup
	const tasks = 20000
	for i := range tasks {
		wg.Add(1)
		p.Go(func() { ran.Add(1); wg.Done() })
		if i%64 == 0 {
			time.Sleep(time.Microsecond) // let lingers expire between bursts
		}
	}
	wg.Wait()
	p.Close()
	if n := ran.Load(); n != tasks {
		t.Fatalf("%d tasks ran, want %d", n, tasks)
	}
}

// Close stops the idle goroutines and waits for the running tasks; it is
// idempotent, and a task started after it still runs and is waited for.
func TestCloseWaitsAndIsIdempotent(t *testing.T) {
	p := New(4, time.Hour)
	p.Go(func() {})
	waitFor(t, func() bool { return p.Idle() == 1 }, "one idle goroutine")
	release := make(chan struct{})
	var finished atomic.Bool
	p.Go(func() { <-release; finished.Store(true) })
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a task ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-closed
	if !finished.Load() || p.Idle() != 0 {
		t.Fatalf("after Close: task finished %v, idle %d", finished.Load(), p.Idle())
	}
	p.Close()
	done := make(chan struct{})
	p.Go(func() { close(done) })
	<-done
	p.Close()
}

func TestNoLingerIsAGoroutineATask(t *testing.T) {
	p := New(0, 0)
	done := make(chan struct{})
	p.Go(func() { close(done) })
	<-done
	p.Close()
	if p.Idle() != 0 {
		t.Fatal("a pool without linger kept a goroutine")
	}
}

func waitFor(t *testing.T, ok func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkWake is a wake-up of a parked stream: a task that needs some
// stack (as a write path does), on a new goroutine each or on the pool.
func BenchmarkWake(b *testing.B) {
	run := func(b *testing.B, spawn func(func())) {
		var wg sync.WaitGroup
		b.ReportAllocs()
		for b.Loop() {
			wg.Add(1)
			spawn(func() { deep(24); wg.Done() })
			wg.Wait()
		}
	}
	b.Run("go", func(b *testing.B) { run(b, func(f func()) { go f() }) })
	b.Run("pool", func(b *testing.B) {
		p := New(64, time.Second)
		defer p.Close()
		run(b, p.Go)
	})
}

//go:noinline
func deep(n int) byte {
	var buf [256]byte
	buf[n%256] = byte(n)
	if n == 0 {
		return buf[0]
	}
	return deep(n-1) + buf[n%256]
}
