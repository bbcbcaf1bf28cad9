// Package gopool runs short tasks on goroutines that outlive them: a task
// goes to a goroutine that finished its last task recently, or to a new one
// when none is idle, so a task never waits behind another, and a burst of
// wake-ups does not pay a goroutine's start and stack growth each.
//
// It serves the parked streams of gateway/transport: every wake-up of an
// idle SSE stream or WebSocket runs a task (write what is queued, read one
// message) that may block on a slow client up to a write timeout; a new
// goroutine per wake-up started with the smallest stack and grew it on
// every run (runtime.newstack and copystack were 9-12 % of single-event
// fan-out profiles).
package gopool

import (
	"sync"
	"time"
)

// Pool runs tasks on reused goroutines. At most MaxIdle goroutines wait for
// work, each for at most Linger; past that they exit, so an idle pool holds
// no goroutine. The number of goroutines running tasks is not bounded: it
// is the number of tasks running at once, as with a go statement each.
//
// Close stops the waiting goroutines and waits for every goroutine of the
// pool, running tasks included; Go after Close runs the task on a goroutine
// of its own, still waited for by a later Close. Safe for concurrent use.
type Pool struct {
	maxIdle int
	linger  time.Duration

	mu     sync.Mutex
	idle   []*worker // guarded by mu; the most recent last (its stack is warm)
	closed bool      // guarded by mu
	wg     sync.WaitGroup
}

type worker struct {
	task chan func() // buffered 1: a handoff never blocks
}

// New returns a pool keeping at most maxIdle goroutines for at most linger
// each. maxIdle < 1 or linger <= 0 make every task a goroutine of its own.
func New(maxIdle int, linger time.Duration) *Pool {
	return &Pool{maxIdle: maxIdle, linger: linger}
}

// Go runs f on an idle goroutine of the pool, or a new one. It never
// blocks.
func (p *Pool) Go(f func()) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.task <- f
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go p.work(f)
}

func (p *Pool) work(f func()) {
	defer p.wg.Done()
	var w *worker
	var t *time.Timer
	for {
		f()
		f = nil
		if p.linger <= 0 || p.maxIdle < 1 {
			return
		}
		if w == nil {
			w = &worker{task: make(chan func(), 1)}
		}
		p.mu.Lock()
		if p.closed || len(p.idle) >= p.maxIdle {
			p.mu.Unlock()
			return
		}
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		if t == nil {
			t = time.NewTimer(p.linger)
		} else {
			t.Reset(p.linger)
		}
		select {
		case f = <-w.task:
			t.Stop()
		case <-t.C:
			if p.leave(w) {
				return
			}
			f = <-w.task // taken by Go or Close as the timer fired: its handoff is on the way
		}
		if f == nil { // Close
			return
		}
	}
}

// leave takes w off the idle list; false when Go or Close took it first.
func (p *Pool) leave(w *worker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.idle {
		if x == w {
			n := copy(p.idle[i:], p.idle[i+1:])
			p.idle[i+n] = nil
			p.idle = p.idle[:i+n]
			return true
		}
	}
	return false
}

// Close lets the idle goroutines go and waits for every goroutine of the
// pool to end. Idempotent; tasks started after it are still waited for by
// a later Close.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, w := range idle {
		w.task <- nil
	}
	p.wg.Wait()
}

// Idle is the number of goroutines waiting for a task now.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}
