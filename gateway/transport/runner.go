package transport

import "sync"

// runner runs tasks on at most max goroutines, started as tasks come and
// ended when none is left: no goroutine while idle. Its queue is bounded
// by its users: a parked stream queues at most one task at a time, so
// there are never more tasks than parked streams. It ends parked streams
// whose client left, so that 10,000 clients leaving at once cost max
// goroutine stacks, not 10,000.
type runner struct {
	max int

	mu      sync.Mutex
	tasks   []func() // guarded by mu
	workers int      // guarded by mu
	wg      sync.WaitGroup
}

// do queues f and starts a worker if fewer than max run. It never blocks.
func (r *runner) do(f func()) {
	r.mu.Lock()
	r.tasks = append(r.tasks, f)
	start := r.workers < r.max
	if start {
		r.workers++
		r.wg.Add(1)
	}
	r.mu.Unlock()
	if start {
		go r.work()
	}
}

func (r *runner) work() {
	defer r.wg.Done()
	for {
		r.mu.Lock()
		if len(r.tasks) == 0 {
			r.tasks = nil // let the backlog of a storm go
			r.workers--
			r.mu.Unlock()
			return
		}
		f := r.tasks[0]
		r.tasks[0] = nil
		r.tasks = r.tasks[1:]
		r.mu.Unlock()
		f()
	}
}

// wait waits for the workers running now to finish.
func (r *runner) wait() { r.wg.Wait() }
