//go:build linux

package netpoll

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// events is what a Handle waits for: readable, peer half-closed, hung up,
// in error; once, until Rearm.
const events = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLHUP | unix.EPOLLERR | unix.EPOLLONESHOT

// wakeToken is the eventfd's token: Close writes to it to stop the loop.
const wakeToken = 0

// Poller is one epoll instance and the goroutine that waits on it. The
// zero value is not usable; call New.
type Poller struct {
	epfd, evfd int
	done       chan struct{} // closed when the loop has returned
	closeOnce  sync.Once

	mu      sync.RWMutex // held (read) by every epoll_ctl, so that Close never closes epfd under one
	closed  bool         // guarded by mu
	failErr error        // why the wait failed for good (nil: it did not); guarded by mu
	onFail  func(error)

	injected atomic.Pointer[error] // Fail's error, taken by the loop as epoll_wait's

	hmu     sync.Mutex
	handles map[int32]*Handle // by token; guarded by hmu
	next    int32             // last token given; guarded by hmu

	// Fired handles wait in fired for one of at most maxDispatchers
	// goroutines, started as they come and gone when none is left: the
	// poller's goroutine only waits and queues, so a slow callback delays
	// the ones behind it on its dispatcher, not every connection. A handle
	// is queued at most once until Rearm (one-shot), so fired holds at
	// most one entry per handle.
	dmu         sync.Mutex
	fired       []*Handle // queued from fired[head]; guarded by dmu
	head        int       // guarded by dmu
	dispatchers int       // running; guarded by dmu
	dwg         sync.WaitGroup
}

// maxDispatchers bounds the goroutines that run callbacks; maxKeptQueue
// the queue kept between bursts.
const (
	maxDispatchers = 8
	maxKeptQueue   = 1024
)

// Handle is one watched connection.
type Handle struct {
	p     *Poller
	fd    int
	token int32
	fn    func()

	mu      sync.Mutex // held while fn runs, so that Remove waits for it
	removed bool       // guarded by mu
}

// Options configure a Poller. The zero value is ready to use.
type Options struct {
	// OnFail, when set, is told once, on the poller's goroutine, that
	// waiting failed for good (epoll_wait failed with an error other than
	// EINTR, or Fail was called): nothing more fires. It must not block.
	OnFail func(err error)
}

// New starts a Poller: an epoll instance and its goroutine.
func New(o Options) (*Poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("netpoll: epoll_create1: %w", err)
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		_ = unix.Close(epfd)
		return nil, fmt.Errorf("netpoll: eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: wakeToken}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &ev); err != nil {
		_ = unix.Close(epfd)
		_ = unix.Close(evfd)
		return nil, fmt.Errorf("netpoll: watch eventfd: %w", err)
	}
	p := &Poller{epfd: epfd, evfd: evfd, done: make(chan struct{}), handles: map[int32]*Handle{}, onFail: o.OnFail}
	go p.loop()
	return p, nil
}

// Add watches c's descriptor (one-shot: readable, peer hang-up, hang-up or
// error). fn runs once that happens, on one of the poller's few
// dispatching goroutines; it must not block (a slow fn delays the
// callbacks queued behind it on its dispatcher) and must not call Remove
// (it hands the work to a goroutine of its owner, which may). Rearm
// watches again. After Remove returns, fn is not running and will not
// run.
func (p *Poller) Add(c syscall.Conn, fn func()) (*Handle, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("netpoll: %w", err)
	}
	fd := -1
	if err := rc.Control(func(s uintptr) { fd = int(s) }); err != nil {
		return nil, fmt.Errorf("netpoll: %w", err)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if err := p.usableLocked(); err != nil {
		return nil, err
	}
	h := &Handle{p: p, fd: fd, fn: fn}
	p.hmu.Lock()
	for {
		p.next++
		if p.next <= wakeToken {
			p.next = wakeToken + 1
		}
		if _, used := p.handles[p.next]; !used {
			break
		}
	}
	h.token = p.next
	p.handles[h.token] = h
	p.hmu.Unlock()
	ev := unix.EpollEvent{Events: events, Fd: h.token}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		p.forget(h.token)
		return nil, fmt.Errorf("netpoll: epoll_ctl add: %w", err)
	}
	return h, nil
}

// usableLocked is nil while the Poller watches: ErrClosed once it is
// closed, ErrFailed (wrapping the cause) once its wait failed. Must hold
// p.mu (read).
func (p *Poller) usableLocked() error {
	switch {
	case p.closed:
		return ErrClosed
	case p.failErr != nil:
		return fmt.Errorf("%w: %w", ErrFailed, p.failErr)
	}
	return nil
}

// Rearm watches the descriptor again after fn ran. It returns ErrClosed
// once the Poller is closed, ErrFailed once its wait failed; after Remove
// it does nothing.
func (h *Handle) Rearm() error {
	p := h.p
	p.mu.RLock()
	defer p.mu.RUnlock()
	if err := p.usableLocked(); err != nil {
		return err
	}
	if h.isRemoved() {
		return nil
	}
	ev := unix.EpollEvent{Events: events, Fd: h.token}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, h.fd, &ev); err != nil && !(errors.Is(err, unix.ENOENT) && h.isRemoved()) {
		return fmt.Errorf("netpoll: epoll_ctl mod: %w", err)
	}
	return nil
}

func (h *Handle) isRemoved() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.removed
}

// Remove stops watching (waiting for a running fn to return): fn does not
// run after it. Call it before closing the connection. Idempotent; after
// the Poller is closed it only forgets the Handle.
func (h *Handle) Remove() error {
	h.mu.Lock()
	if h.removed {
		h.mu.Unlock()
		return nil
	}
	h.removed = true
	h.mu.Unlock()
	p := h.p
	p.forget(h.token)
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return nil
	}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, h.fd, nil); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EBADF) {
		return fmt.Errorf("netpoll: epoll_ctl del: %w", err)
	}
	return nil
}

func (p *Poller) forget(token int32) {
	p.hmu.Lock()
	delete(p.handles, token)
	p.hmu.Unlock()
}

// Close stops the poller's goroutine, waits for it (and for an fn it is
// running) and releases the epoll instance. Handles still added are no
// longer watched; their Remove only forgets them. Idempotent.
func (p *Poller) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.wake()
		<-p.done
		p.dwg.Wait()
		_ = unix.Close(p.epfd)
		_ = unix.Close(p.evfd)
	})
	return nil
}

// Fail makes the poller's goroutine stop as if epoll_wait had failed with
// err: the failure of the kernel's epoll on demand, so that the owners'
// handling of it (OnFail) can be tested like the rest, over real sockets.
// No effect once the Poller failed or closed.
func (p *Poller) Fail(err error) {
	if p.injected.CompareAndSwap(nil, &err) {
		p.wake()
	}
}

// wake makes epoll_wait return (the eventfd turns readable).
func (p *Poller) wake() {
	var one [8]byte
	one[0] = 1 // eventfd counters are host-endian; any non-zero value wakes
	one[7] = 1
	_, _ = unix.Write(p.evfd, one[:])
}

// Watched is the number of Handles added and not removed.
func (p *Poller) Watched() int {
	p.hmu.Lock()
	defer p.hmu.Unlock()
	return len(p.handles)
}

func (p *Poller) loop() {
	defer close(p.done)
	evs := make([]unix.EpollEvent, 128)
	for {
		n, err := unix.EpollWait(p.epfd, evs, -1)
		if e := p.injected.Load(); e != nil {
			n, err = 0, *e // Fail: as if epoll_wait had failed
		}
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			p.fail(err) // the epoll instance is unusable: nothing more will fire
			return
		}
		for i := range n {
			tok := evs[i].Fd
			if tok == wakeToken {
				return
			}
			p.hmu.Lock()
			h := p.handles[tok]
			p.hmu.Unlock()
			if h != nil {
				p.dispatch(h)
			}
		}
	}
}

// fail records why the wait failed, so that Add and Rearm refuse from now
// on, and tells OnFail (unless the Poller is closing: nothing to tell).
func (p *Poller) fail(err error) {
	p.mu.Lock()
	closing := p.closed
	if !closing {
		p.failErr = fmt.Errorf("netpoll: epoll_wait: %w", err)
		err = p.failErr
	}
	p.mu.Unlock()
	if !closing && p.onFail != nil {
		p.onFail(err)
	}
}

// dispatch queues h's callback and starts a dispatcher if fewer than
// maxDispatchers run. It never blocks.
func (p *Poller) dispatch(h *Handle) {
	p.dmu.Lock()
	p.fired = append(p.fired, h)
	start := p.dispatchers < maxDispatchers
	if start {
		p.dispatchers++
		p.dwg.Add(1)
	}
	p.dmu.Unlock()
	if start {
		go p.dispatchLoop()
	}
}

// dispatchLoop runs queued callbacks until none is left.
func (p *Poller) dispatchLoop() {
	defer p.dwg.Done()
	for {
		p.dmu.Lock()
		if p.head == len(p.fired) {
			p.fired, p.head = p.fired[:0], 0 // kept for the next wake-ups...
			if cap(p.fired) > maxKeptQueue {
				p.fired = nil // ...unless a storm grew it
			}
			p.dispatchers--
			p.dmu.Unlock()
			return
		}
		h := p.fired[p.head]
		p.fired[p.head] = nil
		p.head++
		p.dmu.Unlock()
		h.fire()
	}
}

// fire runs fn unless the Handle was removed.
func (h *Handle) fire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.removed {
		h.fn()
	}
}
