package transport

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/internal/queue"
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
// queue (allocated as it fills), writing what is queued as one buffer of
// frames with one write under one deadline, an optional heartbeat, and
// the binding's own workers started with Go. Serve joins them all before
// it returns.
type Conn struct {
	ws  *Socket
	cfg WSConfig
	log zerolog.Logger

	ctx    context.Context // ends every goroutine of the connection
	cancel context.CancelFunc
	out    *queue.Queue[Item]
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
	// connection holds no pinger. pingSent is the UnixNano of the ping
	// not yet answered (0: none); the pong's reader clears it.
	pingMu    sync.Mutex
	pingTimer *time.Timer // guarded by pingMu
	pingEnded bool        // no ping starts any more; guarded by pingMu
	pingSent  atomic.Int64
}

// NewConn wraps an upgraded WebSocket. Serve runs it. ws may be nil for a
// Conn that is never served (tests of a binding's message handling).
func NewConn(ws *Socket, cfg WSConfig) *Conn {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{
		ws: ws, cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel,
		out: queue.New[Item](cfg.Outbound), urgent: make(chan Item, 1), writerDone: make(chan struct{}),
	}
	if ws != nil {
		ws.OnPong(func() { c.pingSent.Store(0) })
	}
	return c
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
	if c.ctx.Err() != nil {
		return false
	}
	return c.out.Push(ctx, it) == nil
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
	if c.out.Offer(closeItem(msg, status, reason)) {
		c.closeQueued.Store(true)
		return
	}
	c.CloseNow(status, reason)
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
// subscriptions), stops the writer once what is queued is written, joins
// every goroutine of the connection, and ends the close handshake.
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
	c.ws.Finish()
}

func (c *Conn) readLoop(handle func(websocket.MessageType, []byte) bool) {
	bounded := false
	for {
		if t := c.cfg.HandshakeTimeout; t > 0 && !c.ready.Load() {
			c.ws.SetReadDeadline(time.Now().Add(t))
			bounded = true
		} else if bounded {
			c.ws.SetReadDeadline(time.Time{})
			bounded = false
		}
		typ, data, err := c.ws.ReadMessage()
		if err != nil {
			if websocket.CloseStatus(err) == -1 && c.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
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
// connection's context and ends the queue when it stops; when it stops
// without a close frame written (a write failed, or the peer left), it
// aborts the socket so that the reader returns.
func (c *Conn) writer() {
	defer close(c.writerDone)
	defer c.out.End()
	defer c.cancel()
	closed := false
	defer func() {
		if !closed {
			c.ws.Abort()
		}
	}()
	var tick <-chan time.Time
	hb := c.cfg.Heartbeat
	if hb.Every > 0 && hb.Frame != nil {
		t := time.NewTicker(hb.Every)
		defer t.Stop()
		tick = t.C
	}
	var lastSeen int64 // lastRead at the previous tick
	quietTicks := 0
	w := wsWriter{c: c}
	for {
		select {
		case <-c.ctx.Done():
			// The reader returned (the peer left or closed): what it
			// needed to say it has said.
			closed = true
			return
		case it := <-c.urgent:
			closed = w.closeWith(it)
			return
		case now := <-tick:
			if lr := c.lastRead.Load(); lr != lastSeen {
				lastSeen, quietTicks = lr, 0
			}
			quietTicks++
			if silent := now.Sub(time.Unix(0, lastSeen)); silent > 3*hb.Every && quietTicks >= 3 {
				closed = w.closeWith(c.timeoutItem(silent))
				return
			}
			if c.beating.Load() && !w.flush(AppendFrame(w.get(), opText, hb.Frame()), false) {
				return
			}
		case <-c.out.Ready():
			more, wasClose := w.run()
			if !more {
				closed = wasClose
				return
			}
		}
	}
}

// maxRun is the most queued messages written with one write; maxRunBytes
// ends a run early once its buffer holds that much.
const (
	maxRun      = 64
	maxRunBytes = 256 << 10
)

// wsBufs holds write buffers between runs, so that an idle connection
// holds none.
var wsBufs = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// wsWriter is the writer goroutine's state.
type wsWriter struct {
	c     *Conn
	buf   *[]byte
	metas []any
}

// get returns an empty buffer from the pool; flush gives it back.
func (w *wsWriter) get() []byte {
	w.buf = wsBufs.Get().(*[]byte)
	return (*w.buf)[:0]
}

// flush writes b (from get) and returns the buffer to the pool; false when
// the write failed.
func (w *wsWriter) flush(b []byte, closes bool) bool {
	err := w.c.ws.Write(b, w.c.cfg.WriteTimeout, closes)
	if cap(b) <= 1<<20 {
		*w.buf = b[:0]
		wsBufs.Put(w.buf)
	}
	w.buf = nil
	if err != nil {
		w.c.log.Debug().Err(err).Msg("transport: websocket write")
		return false
	}
	return true
}

// run appends what is queued (up to maxRun messages or maxRunBytes) as
// frames to one buffer and writes it with one write, then hands the metas
// written to WSConfig.Written. more is false when the writer must stop
// (a write failed or a close was written: wasClose).
func (w *wsWriter) run() (more, wasClose bool) {
	c := w.c
	b := w.get()
	w.metas = w.metas[:0]
	for n := 0; n < maxRun && len(b) < maxRunBytes && len(c.urgent) == 0; n++ {
		it, ok, _ := c.out.Next()
		if !ok {
			break
		}
		if len(it.Msg) > 0 {
			b = AppendFrame(b, opText, it.Msg)
			if it.Meta != nil && c.cfg.Written != nil {
				w.metas = append(w.metas, it.Meta)
			}
		}
		if it.end != nil {
			b = w.appendClose(b, it.end)
			ok := w.flush(b, true)
			w.written(ok)
			return false, ok
		}
	}
	if len(b) == 0 {
		*w.buf = b
		wsBufs.Put(w.buf)
		w.buf = nil
		return true, false
	}
	ok := w.flush(b, false)
	w.written(ok)
	return ok, false
}

func (w *wsWriter) written(ok bool) {
	if ok {
		for _, m := range w.metas {
			w.c.cfg.Written(m)
		}
	}
	clear(w.metas)
	w.metas = w.metas[:0]
}

// appendClose appends the Closing message and the close frame of end.
func (w *wsWriter) appendClose(b []byte, end *closeFrame) []byte {
	if f := w.c.cfg.Closing; f != nil {
		if m := f(end.reason); len(m) > 0 {
			b = AppendFrame(b, opText, m)
		}
	}
	return appendClose(b, end.status, end.reason)
}

// closeWith writes it.Msg, the Closing message and the close frame with
// one write; true when it was written.
func (w *wsWriter) closeWith(it Item) bool {
	b := w.get()
	if len(it.Msg) > 0 {
		b = AppendFrame(b, opText, it.Msg)
	}
	return w.flush(w.appendClose(b, it.end), true)
}

func (c *Conn) timeoutItem(silent time.Duration) Item {
	if f := c.cfg.Heartbeat.OnTimeout; f != nil {
		return closeItem(f(silent))
	}
	return closeItem(nil, websocket.StatusPolicyViolation, "no frame for "+silent.Round(time.Millisecond).String())
}

// ping runs on the heartbeat timer's goroutine every period: it times the
// peer out when the last ping has gone unanswered for three periods (its
// timeout message and close are queued behind what is queued), and
// otherwise sends a ping when none is outstanding.
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
	now := time.Now()
	if sent := c.pingSent.Load(); sent != 0 {
		if silent := now.Sub(time.Unix(0, sent)); silent >= 3*every {
			c.log.Info().Dur("silent", silent).Msg("transport: websocket heartbeat timeout")
			c.SendCtx(c.ctx, c.timeoutItem(3*every))
			return
		}
	} else {
		c.pingSent.Store(now.UnixNano())
		if err := c.ws.Ping(c.cfg.WriteTimeout); err != nil {
			return // the socket is closed: the reader returns
		}
	}
	c.pingMu.Lock()
	if !c.pingEnded {
		c.pingTimer.Reset(every)
	}
	c.pingMu.Unlock()
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
		it, ok, _ := c.out.Next()
		if !ok {
			return out
		}
		out = append(out, it)
	}
}

// Stop ends a Conn that is not served: it cancels its context and waits
// for its workers.
func (c *Conn) Stop() {
	c.cancel()
	c.out.End()
	c.endPings()
	c.workers.Wait()
}
