package transport

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"
)

// WSConfig configures a Conn. Zero fields mean the defaults named.
type WSConfig struct {
	// Outbound is the length of the connection's outbound queue, in
	// messages. A sender that finds it full waits (Send, SendCtx): the
	// queue bounds the connection's memory, and a subscription whose pump
	// waits fills its own bounded queue, which the engine handles as for
	// any slow consumer. Zero means 256.
	Outbound int
	// WriteTimeout bounds each write (queued messages written back to
	// back, at most 64, share one); a write that does not finish in time
	// ends the connection. Zero means 10s.
	WriteTimeout time.Duration
	// HandshakeTimeout bounds each read until Ready is called (the
	// dialect's opening message must come in time). Zero means no bound.
	HandshakeTimeout time.Duration
	// Heartbeat is how the connection keeps its peer honest once
	// StartHeartbeat is called.
	Heartbeat Heartbeat
	// Closing, when set, builds the last message written before every
	// close frame (dialect R's closing frame); it runs in the writer.
	Closing func(reason string) []byte
	// Written, when set, is called by the writer after each message whose
	// Item has a Meta was written, with that Meta (a binding's bookkeeping
	// of what reached the socket). It runs in the writer.
	Written func(meta any)
	Logger  zerolog.Logger
}

// Heartbeat is a connection's liveness check. With Frame nil the
// connection sends WebSocket protocol pings every Every and a peer that
// does not answer one within three periods is timed out. With Frame set it
// writes Frame() every Every (an application-level ping) and times out a
// peer that has sent nothing for three periods (and three handled ticks,
// so a loaded machine never times out a peer that was not pinged). A
// timed-out peer gets OnTimeout's message (if any) and its close. Every
// zero or negative disables the heartbeat.
type Heartbeat struct {
	Every     time.Duration
	Frame     func() []byte
	OnTimeout func(silent time.Duration) (msg []byte, status websocket.StatusCode, reason string)
}

func (c WSConfig) withDefaults() WSConfig {
	if c.Outbound <= 0 {
		c.Outbound = 256
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	return c
}

// Item is one element of a connection's outbound queue: a text message
// with optional bookkeeping (Meta, handed to WSConfig.Written once the
// message is written).
type Item struct {
	Msg  []byte
	Meta any

	end *closeFrame // a close frame, after Msg if any
}

// closeFrame is the close an Item ends with: behind a pointer, so that an
// Item is six words and a connection's outbound queue (allocated whole
// when it opens) 48 bytes a slot, not 64.
type closeFrame struct {
	status websocket.StatusCode
	reason string
}

func closeItem(msg []byte, status websocket.StatusCode, reason string) Item {
	return Item{Msg: msg, end: &closeFrame{status: status, reason: reason}}
}

// Conn is one WebSocket connection as every binding serves it: the reader
// is the caller's goroutine (Serve), one writer drains a bounded outbound
// queue with per-write deadlines, an optional heartbeat timer, and the binding's
// own workers started with Go. Serve joins them all before it returns.
type Conn struct {
	ws  *websocket.Conn
	cfg WSConfig
	log zerolog.Logger

	ctx    context.Context // ends every goroutine of the connection
	cancel context.CancelFunc
	out    chan Item
	// urgent carries a close that skips the queue (shutdown, timeouts).
	urgent    chan Item
	urgentOne sync.Once
	urgentSet atomic.Bool

	ready       atomic.Bool  // Ready called: reads are no longer bounded
	beating     atomic.Bool  // StartHeartbeat called
	lastRead    atomic.Int64 // UnixNano of the last message read
	closeQueued atomic.Bool
	workers     sync.WaitGroup
	writerDone  chan struct{}
	beatOnce    sync.Once

	// The protocol-ping heartbeat is a timer, not a goroutine: an idle
	// connection holds no pinger; a ping's goroutine (the timer's) lives
	// for its round trip and counts as a worker.
	pingMu    sync.Mutex
	pingTimer *time.Timer // guarded by pingMu
	pingEnded bool        // no ping starts any more; guarded by pingMu
}

// NewConn wraps an accepted WebSocket. Serve runs it.
func NewConn(ws *websocket.Conn, cfg WSConfig) *Conn {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Conn{
		ws: ws, cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel,
		out: make(chan Item, cfg.Outbound), urgent: make(chan Item, 1), writerDone: make(chan struct{}),
	}
}

// Context ends when the connection ends (the writer stopped, or Serve is
// returning); workers watch it.
func (c *Conn) Context() context.Context { return c.ctx }

// Ready ends the handshake: reads are no longer bounded by
// HandshakeTimeout.
func (c *Conn) Ready() { c.ready.Store(true) }

// StartHeartbeat starts the heartbeat (after the dialect's handshake, so
// that the first ping follows the server's greeting). Idempotent.
func (c *Conn) StartHeartbeat() {
	c.beatOnce.Do(func() {
		c.beating.Store(true)
		if hb := c.cfg.Heartbeat; hb.Every > 0 && hb.Frame == nil {
			c.pingMu.Lock()
			if !c.pingEnded {
				c.pingTimer = time.AfterFunc(hb.Every, c.ping)
			}
			c.pingMu.Unlock()
		}
	})
}

// Go runs f as a worker of the connection: Serve waits for it before it
// returns. f must return once Context ends.
func (c *Conn) Go(f func()) {
	c.workers.Add(1)
	go func() {
		defer c.workers.Done()
		f()
	}()
}

// Send queues msg, waiting for room; false when the connection is ending.
func (c *Conn) Send(msg []byte) bool { return c.SendCtx(c.ctx, Item{Msg: msg}) }

// SendCtx queues it, waiting for room; false when ctx or the connection
// ends first (a subscription's pump passes its own context, so that
// stopping the subscription never waits for the writer).
func (c *Conn) SendCtx(ctx context.Context, it Item) bool {
	select {
	case c.out <- it:
		return true
	case <-ctx.Done():
		return false
	case <-c.ctx.Done():
		return false
	}
}

// Close queues a close frame (after WSConfig.Closing's message) behind
// everything queued so far. Reader only.
func (c *Conn) Close(status websocket.StatusCode, reason string) {
	c.closeQueued.Store(true)
	c.SendCtx(c.ctx, closeItem(nil, status, reason))
}

// CloseAfter queues msg then a close frame when there is room, or closes
// at once, ahead of the queue, when there is not; safe from any goroutine
// (shutdown: what is queued still goes out when it can).
func (c *Conn) CloseAfter(msg []byte, status websocket.StatusCode, reason string) {
	select {
	case c.out <- closeItem(msg, status, reason):
		c.closeQueued.Store(true)
	default:
		c.CloseNow(status, reason)
	}
}

// CloseNow closes ahead of the queue (after WSConfig.Closing's message);
// safe from any goroutine, effective once.
func (c *Conn) CloseNow(status websocket.StatusCode, reason string) {
	c.urgentOne.Do(func() {
		c.urgentSet.Store(true)
		c.urgent <- closeItem(nil, status, reason)
	})
}

// Serve runs the connection: it starts the writer, reads messages and
// hands each to handle until the connection ends or handle returns false
// (after queueing a close), then calls onEnd (the binding stops its
// subscriptions), stops the writer once what is queued is written, and
// joins every goroutine of the connection.
func (c *Conn) Serve(handle func(typ websocket.MessageType, data []byte) bool, onEnd func()) {
	c.lastRead.Store(time.Now().UnixNano())
	go c.writer()
	c.readLoop(handle)
	if onEnd != nil {
		onEnd()
	}
	select {
	case <-c.writerDone: // the writer closed the connection
	default:
		if !c.closeQueued.Load() && !c.urgentSet.Load() {
			c.cancel() // the peer left: nothing more to say
		}
	}
	<-c.writerDone
	c.cancel()
	c.endPings()
	c.workers.Wait()
	_ = c.ws.CloseNow()
}

func (c *Conn) readLoop(handle func(websocket.MessageType, []byte) bool) {
	for {
		ctx, cancel := c.ctx, context.CancelFunc(func() {})
		if t := c.cfg.HandshakeTimeout; t > 0 && !c.ready.Load() {
			ctx, cancel = context.WithTimeout(c.ctx, t)
		}
		typ, data, err := c.ws.Read(ctx)
		cancel()
		if err != nil {
			if websocket.CloseStatus(err) == -1 && c.ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				c.log.Debug().Err(err).Msg("transport: websocket read")
			}
			return
		}
		c.lastRead.Store(time.Now().UnixNano())
		if !handle(typ, data) {
			return
		}
	}
}

// writer writes queued items in order, runs the frame heartbeat, and on a
// close item writes the closing message and closes. It cancels the
// connection's context when it stops.
func (c *Conn) writer() {
	defer close(c.writerDone)
	defer c.cancel()
	var tick <-chan time.Time
	hb := c.cfg.Heartbeat
	if hb.Every > 0 && hb.Frame != nil {
		t := time.NewTicker(hb.Every)
		defer t.Stop()
		tick = t.C
	}
	var lastSeen int64 // lastRead at the previous tick
	quietTicks := 0
	for {
		select {
		case <-c.ctx.Done():
			return
		case it := <-c.urgent:
			c.closeWith(it)
			return
		case now := <-tick:
			if lr := c.lastRead.Load(); lr != lastSeen {
				lastSeen, quietTicks = lr, 0
			}
			quietTicks++
			if silent := now.Sub(time.Unix(0, lastSeen)); silent > 3*hb.Every && quietTicks >= 3 {
				c.closeWith(c.timeoutItem(silent))
				return
			}
			if c.beating.Load() && !c.write(hb.Frame()) {
				return
			}
		case it := <-c.out:
			if !c.writeRun(it) {
				return
			}
		}
	}
}

// maxRun is the most queued messages written under one deadline.
const maxRun = 64

// writeRun writes it and then, under the same deadline (one timer for the
// run instead of one per message), what else is queued, up to maxRun
// messages; an urgent close waiting ends the run. False when the writer
// must stop (a write failed or a close was written).
func (c *Conn) writeRun(it Item) bool {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.WriteTimeout)
	defer cancel()
	for n := 1; ; n++ {
		if len(it.Msg) > 0 {
			if err := c.ws.Write(ctx, websocket.MessageText, it.Msg); err != nil {
				c.log.Debug().Err(err).Msg("transport: websocket write")
				return false
			}
			if it.Meta != nil && c.cfg.Written != nil {
				c.cfg.Written(it.Meta)
			}
		}
		if it.end != nil {
			c.closeWith(Item{end: it.end})
			return false
		}
		if n == maxRun || len(c.urgent) > 0 {
			return true
		}
		select {
		case it = <-c.out:
		default:
			return true
		}
	}
}

func (c *Conn) write(b []byte) bool {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.WriteTimeout)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		c.log.Debug().Err(err).Msg("transport: websocket write")
		return false
	}
	return true
}

// closeWith writes it.Msg, the Closing message, and the close frame.
// Writer only.
func (c *Conn) closeWith(it Item) {
	if len(it.Msg) > 0 && !c.write(it.Msg) {
		return
	}
	if c.cfg.Closing != nil {
		if m := c.cfg.Closing(it.end.reason); len(m) > 0 && !c.write(m) {
			return
		}
	}
	_ = c.ws.Close(it.end.status, truncReason(it.end.reason))
}

func (c *Conn) timeoutItem(silent time.Duration) Item {
	if f := c.cfg.Heartbeat.OnTimeout; f != nil {
		return closeItem(f(silent))
	}
	return closeItem(nil, websocket.StatusPolicyViolation, "no frame for "+silent.Round(time.Millisecond).String())
}

// ping sends one protocol ping (the heartbeat timer's goroutine) and
// arms the timer for the next; a peer that does not answer within three
// periods is timed out: its timeout message and close are queued behind
// what is queued.
func (c *Conn) ping() {
	c.pingMu.Lock()
	if c.pingEnded {
		c.pingMu.Unlock()
		return
	}
	c.workers.Add(1)
	c.pingMu.Unlock()
	defer c.workers.Done()
	every := c.cfg.Heartbeat.Every
	ctx, cancel := context.WithTimeout(c.ctx, 3*every)
	err := c.ws.Ping(ctx)
	cancel()
	if err == nil {
		c.pingMu.Lock()
		if !c.pingEnded {
			c.pingTimer.Reset(every)
		}
		c.pingMu.Unlock()
		return
	}
	if c.ctx.Err() == nil {
		c.log.Info().Err(err).Msg("transport: websocket heartbeat timeout")
		c.SendCtx(c.ctx, c.timeoutItem(3*every))
	}
}

// endPings stops the heartbeat timer; a ping already running is a worker
// and is waited for with them.
func (c *Conn) endPings() {
	c.pingMu.Lock()
	c.pingEnded = true
	if c.pingTimer != nil {
		c.pingTimer.Stop()
	}
	c.pingMu.Unlock()
}

// truncReason keeps a close reason within the 123 bytes a close frame
// allows.
func truncReason(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}

// IsClose reports whether the item closes the connection.
func (it Item) IsClose() bool { return it.end != nil }

// CloseQueued reports whether a close frame was queued (Close,
// CloseAfter).
func (c *Conn) CloseQueued() bool { return c.closeQueued.Load() }

// TakeQueued removes and returns what is queued without writing it, for a
// Conn that is not served (tests of a binding's message handling).
func (c *Conn) TakeQueued() []Item {
	var out []Item
	for {
		select {
		case it := <-c.out:
			out = append(out, it)
		default:
			return out
		}
	}
}

// Stop ends a Conn that is not served: it cancels its context and waits
// for its workers.
func (c *Conn) Stop() {
	c.cancel()
	c.endPings()
	c.workers.Wait()
}
