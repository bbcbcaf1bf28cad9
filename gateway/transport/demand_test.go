package transport

import (
	"sync/atomic"
	"testing"
	"time"
)

// A stopped demand waits for the run in progress (a parked connection's
// reader still handling a message) and starts nothing afterwards, even
// when kicked while stopping: the binding's clean-up then never races it.
func TestDemandStopWaitsForTheRunAndStartsNoMore(t *testing.T) {
	c := &Conn{}
	var d demand
	var runs atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	f := func() {
		if runs.Add(1) == 1 {
			close(entered)
			<-release
		}
	}
	d.kick(c, f)
	<-entered
	d.kick(c, f) // kicked while running: once more, unless stopped
	stopped := make(chan struct{})
	go func() {
		d.stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("stop returned while the run was in progress")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-stopped
	d.kick(c, f)
	c.workers.Wait()
	if n := runs.Load(); n != 1 {
		t.Fatalf("f ran %d times; the kick that came while running must not run it after stop", n)
	}
}

// Stopping an idle demand returns at once; a demand whose goroutine the
// ending connection refused is idle again, and stops at once too.
func TestDemandStopIdleAndRefusedSpawn(t *testing.T) {
	var d demand
	d.stop()
	d.kick(&Conn{}, func() { t.Error("ran after stop") })

	c := &Conn{ending: true}
	var d2 demand
	d2.kick(c, func() { t.Error("ran on an ending connection") })
	done := make(chan struct{})
	go func() { d2.stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("stop waited for a run that never started")
	}
}
