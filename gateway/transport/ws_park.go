package transport

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/aep-gateway/aep-gateway/internal/netpoll"
	"github.com/aep-gateway/aep-gateway/internal/queue"
)

// mayLinger reports whether ending the connection may wait on the peer:
// for the write of a close (WriteTimeout) or for the peer's answer to it
// (closeWait). Not when the peer's close was read, nor when no close was
// or will be written (the peer left).
func (c *Conn) mayLinger() bool {
	if c.ws.gotClose.Load() {
		return false
	}
	return c.closeQueued.Load() || c.urgentSet.Load() || c.ws.sentAny.Load()
}

// demand runs a function on a goroutine of a connection when kicked: at
// most one at a time, once more when kicked while it runs, and no
// goroutine while idle; once stopped, never again. The zero value is
// ready.
type demand struct {
	state atomic.Int32 // demandRunning | demandAgain | demandStopped

	mu   sync.Mutex
	idle chan struct{} // made by stop; closed when a stopped demand's run ends
}

const (
	demandRunning = 1 << iota
	demandAgain
	demandStopped
)

// kick runs f (as a worker of c) unless it runs already; then it runs once
// more when it returns. Nothing starts once c is ending or d stopped.
func (d *demand) kick(c *Conn, f func()) {
	for {
		s := d.state.Load()
		switch {
		case s&demandStopped != 0, s&demandAgain != 0:
			return
		case s&demandRunning != 0:
			if d.state.CompareAndSwap(s, s|demandAgain) {
				return
			}
		default:
			if d.state.CompareAndSwap(s, demandRunning) {
				if !c.spawn(func() { d.loop(f) }) {
					d.finish()
				}
				return
			}
		}
	}
}

func (d *demand) loop(f func()) {
	for {
		f()
		if !d.again() {
			return
		}
	}
}

// again reports whether the run goes on (kicked while running, not
// stopped); otherwise it ends the run.
func (d *demand) again() bool {
	for {
		s := d.state.Load()
		if s&demandAgain != 0 && s&demandStopped == 0 {
			if d.state.CompareAndSwap(s, demandRunning) {
				return true
			}
			continue
		}
		if d.finishFrom(s) {
			return false
		}
	}
}

// finish ends a run that did not start (spawn refused).
func (d *demand) finish() {
	for !d.finishFrom(d.state.Load()) {
	}
}

// finishFrom ends the run from state s; false when s changed meanwhile. A
// stop waiting for the run learns that it ended.
func (d *demand) finishFrom(s int32) bool {
	if !d.state.CompareAndSwap(s, s&demandStopped) {
		return false
	}
	if s&demandStopped != 0 {
		d.mu.Lock()
		close(d.idle)
		d.mu.Unlock()
	}
	return true
}

// stop makes kicks start nothing any more and waits for the run in
// progress, if any, to return. Once, and never from within f.
func (d *demand) stop() {
	d.mu.Lock()
	d.idle = make(chan struct{})
	d.mu.Unlock()
	for {
		s := d.state.Load()
		if d.state.CompareAndSwap(s, s|demandStopped) {
			if s&demandRunning != 0 {
				<-d.idle
			}
			return
		}
	}
}

// park hands the reading over to the Hub's poller when the connection is
// Ready, parking is possible and nothing read is left in memory; true
// when it did (Serve returns). Reader only.
func (c *Conn) park() bool {
	if c.noPark || c.cfg.Stream == nil || !c.ready.Load() || c.ws.buffered() {
		return false
	}
	sc, ok := c.ws.nc.(syscall.Conn)
	if !ok {
		c.noPark = true
		return false
	}
	hub := c.cfg.Stream.h
	ps := hub.acquirePoller()
	if ps == nil {
		c.noPark = true
		return false
	}
	parked, err := c.watch(ps, sc)
	if !parked {
		hub.releasePoller(ps)
	}
	if err != nil {
		c.noPark = true
		c.log.Debug().Err(err).Msg("transport: websocket not parked")
	}
	return parked
}

// watch adds the connection to p unless it is ending (then the reader sees
// it through).
func (c *Conn) watch(ps *pollSet, sc syscall.Conn) (bool, error) {
	c.life.Lock()
	defer c.life.Unlock()
	if c.wstop || c.ending {
		return false, nil
	}
	c.sc = sc // before Add: the callback may run at once
	c.fd.init(ps, c)
	if err := c.fd.add(sc, c.wake); err != nil {
		return false, err
	}
	c.parked = true
	if c.ws.hooks != nil {
		// The middleware that measures requests when their handler
		// returns learns that this one parked (OnPark), and is told when
		// it ends (endParked, after shut: it reads ends after this lock).
		c.ends = runParkHooks(context.WithValue(context.Background(), parkHooksKey{}, c.ws.hooks))
		// The hooks' closures hold the request (its headers, URL and
		// context, about 2 KB); what they need at the end is in ends.
		c.ws.hooks = nil
	}
	return true, nil
}

// wake is the poller's callback (it must not block): the peer sent
// something, hung up or the socket failed. A peer that left with nothing
// to read ends the connection at once; otherwise a reader runs.
func (c *Conn) wake() {
	if peerGone(c.sc) {
		c.endParked()
		return
	}
	c.reading.kick(c, c.readParked)
}

// readParked reads and handles one message of a parked connection, then
// watches the socket again; the connection ends when reading does. Once
// the connection left the failed poller (unparked) it goes on reading, as
// Serve does.
func (c *Conn) readParked() {
	for {
		if !c.readOne(!c.unparked.Load()) {
			c.endParked()
			return
		}
		if c.unparked.Load() || c.ws.buffered() {
			continue // frames that came with this one: no trip through the poller
		}
		err := c.fd.rearm()
		switch {
		case err == nil:
			return
		case errors.Is(err, netpoll.ErrFailed):
			c.leavePoller() // before the Hub's unpark comes: read on
		default:
			c.log.Debug().Err(err).Msg("transport: websocket rearm")
			c.endParked()
			return
		}
	}
}

// unpark moves the connection off the failed poller to a reader goroutine
// of its own (readParked, reading on), unless it is ending.
func (c *Conn) unpark() {
	if c.leavePoller() {
		c.reading.kick(c, c.readParked)
	}
}

// leavePoller takes the connection off the poller for good (it failed);
// false when it was off already (ending, or left).
func (c *Conn) leavePoller() bool {
	c.unparked.Store(true) // its reader reads on from now
	return c.fd.leave()
}

// endParked ends a parked connection (once): the poller stops watching
// it, then shut. That runs on one of the Hub's few enders, so that
// thousands of clients leaving at once cost a few goroutine stacks, not
// thousands; a connection whose close handshake may still wait for the
// peer (up to closeWait) ends on a goroutine of its own instead, so that
// it never holds an ender. The Hub waits for either through the binding's
// Ended (Stream.Leave).
func (c *Conn) endParked() {
	c.endOnce.Do(func() {
		end := func() {
			// Off the poller before the descriptor is closed (shut): its
			// number may go to the next connection at once.
			c.fd.leave()
			c.fd.release()
			// shut's onEnd runs once the reader stopped, as Serve's does:
			// a reader still handling a message (the writer failed under
			// it) must not race the binding's clean-up.
			c.reading.stop()
			c.shut()
			for _, end := range c.ends {
				end(c.ws.Written())
			}
		}
		if c.mayLinger() {
			go end()
			return
		}
		c.cfg.Stream.h.enders.do(end)
	})
}

// Pump moves q's elements through each on a goroutine of c that runs only
// while q holds elements (a subscription's pump, holding no goroutine
// while the subscription is idle). each may wait (for room in the
// connection's queue); it returns false to stop the pump. stop runs once
// when the pump stops, with ended true when q ended and was drained. A
// pump whose queue ends after c's end began never runs again and never
// calls stop: c's onEnd should end its pumps' queues.
func Pump[T any](c *Conn, q *queue.Queue[T], each func(T) bool, stop func(ended bool)) {
	p := &pump[T]{q: q, each: each, stop: stop}
	q.OnReady(func() { p.d.kick(c, p.drain) })
}

type pump[T any] struct {
	q       *queue.Queue[T]
	each    func(T) bool
	stop    func(ended bool)
	d       demand
	stopped bool // set by drain; one drain runs at a time
}

func (p *pump[T]) drain() {
	for !p.stopped {
		v, ok, ended := p.q.Next()
		switch {
		case ended:
			p.halt(true)
		case !ok:
			return
		case !p.each(v):
			p.halt(false)
		}
	}
}

func (p *pump[T]) halt(ended bool) {
	p.stopped = true
	p.q.OnReady(nil)
	p.stop(ended)
}
