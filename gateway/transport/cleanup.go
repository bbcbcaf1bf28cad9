package transport

// Cleanup is what a stream's end owes (Leave its admission, close its
// subscription, forget it), run exactly once in reverse order of Add: by
// the handler's deferred Run when the stream ended in its goroutine, or by
// a parked stream when it ends, whichever goroutine ends it. A handler
// builds it in its own goroutine; ServeSSE takes it over when it parks.
// The zero value is ready to use.
type Cleanup struct {
	fns  []func()
	done bool
}

// Add registers f to run at the end, before what was added earlier.
func (c *Cleanup) Add(f func()) { c.fns = append(c.fns, f) }

// Run runs what was added, unless a parked stream took it over or it ran
// already. Defer it right after the Cleanup is made.
func (c *Cleanup) Run() {
	if c.done {
		return
	}
	runAll(c.take())
}

// take hands what was added over to the caller (a parked stream), which
// must runAll it exactly once; Run then does nothing.
func (c *Cleanup) take() []func() {
	fns := c.fns
	c.fns, c.done = nil, true
	return fns
}

// runAll runs fns in reverse order.
func runAll(fns []func()) {
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}
