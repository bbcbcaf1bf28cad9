package transport

import (
	"sync"
	"sync/atomic"
	"testing"
)

// The runner never runs more than max tasks at once, runs every task, and
// keeps no worker once they are done.
func TestRunnerBoundsWorkersAndRunsEveryTask(t *testing.T) {
	r := &runner{max: 4}
	const n = 100
	var running, peak, ran atomic.Int32
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(r.max)
	for i := range n {
		r.do(func() {
			now := running.Add(1)
			for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
			}
			if i < r.max {
				started.Done()
			}
			<-release
			running.Add(-1)
			ran.Add(1)
		})
	}
	started.Wait() // max workers are busy, the other tasks queued
	r.mu.Lock()
	workers, queued := r.workers, len(r.tasks)
	r.mu.Unlock()
	if workers != r.max || queued != n-r.max {
		t.Fatalf("%d workers, %d queued; want %d and %d", workers, queued, r.max, n-r.max)
	}
	close(release)
	r.wait()
	if ran.Load() != n || peak.Load() > int32(r.max) {
		t.Fatalf("ran %d of %d, at most %d at once (max %d)", ran.Load(), n, peak.Load(), r.max)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.workers != 0 || r.tasks != nil {
		t.Fatalf("after the work: %d workers, %d tasks kept", r.workers, len(r.tasks))
	}
}
