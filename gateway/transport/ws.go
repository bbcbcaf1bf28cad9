package transport

import (
	"context"
	"errors"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
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
	// OutboundBytes bounds the bytes of the messages queued: a sender whose
	// message would take the queue past it waits as for a full queue (one
	// message larger than the bound passes when nothing else is queued).
	// The count alone let 256 events of 100 KB wait on one connection.
	// Zero means DefaultOutboundBytes.
	OutboundBytes int
	// WriteTimeout bounds each write (queued messages written back to
	// back, at most 64, share one); a write that does not finish in time
	// ends the connection. Zero means 10s.
	WriteTimeout time.Duration
	// HandshakeTimeout bounds each read until Ready is called (the
	// dialect's opening message must come in time). Zero means no bound.
	HandshakeTimeout time.Duration
	// ReadTimeout bounds a parked connection's read once the poller saw
	// bytes, and in Serve the rest of a payload longer than its first 16
	// KiB part: a peer that stalls mid-message is cut off instead of
	// holding a reader (and payloads are read as they arrive, never
	// allocated from the announced length). Idle time between messages
	// is not bounded by it (the heartbeat times out a silent peer), nor is
	// a short message in Serve, where a deadline per message would cost
	// two deadline changes each (+36 % a read, docs/architecture.md) and
	// the heartbeat ends a peer stalled mid-frame (it cannot answer a
	// ping). Zero means 30s.
	ReadTimeout time.Duration
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
	// Stream, when set, is the connection's admission in a Hub. Once the
	// connection is Ready and has nothing left to read, it parks on the
	// Hub's poller (unless the Hub's parking is off, the platform has no
	// poller, or the connection has no descriptor, e.g. TLS): Serve
	// returns, the handler's goroutine leaves, and the connection holds no
	// goroutine until the peer sends (a reader runs for that message),
	// something is queued (a writer runs until the queue is empty) or a
	// heartbeat timer fires. The Hub's Shutdown ends it like any stream
	// (its OnShutdown), and waits for it through Ended.
	Stream *Stream
	// Ended, when set, runs once when the connection has ended, its
	// socket is closed and every goroutine of it was joined: before Serve
	// returns, or on the goroutine that ended a parked connection. The
	// binding's last bookkeeping goes there (Stream.Leave).
	Ended  func()
	Logger zerolog.Logger
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
	if c.OutboundBytes <= 0 {
		c.OutboundBytes = DefaultOutboundBytes
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 30 * time.Second
	}
	return c
}

// DefaultOutboundBytes is a connection's outbound byte bound when
// WSConfig sets none.
const DefaultOutboundBytes = 2 << 20

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

// Conn is one WebSocket connection as every binding serves it: a reader
// (the caller's goroutine in Serve, or once parked a goroutine per message
// read), a writer that runs while the bounded outbound queue (allocated as
// it fills) holds something, writing what is queued as one buffer of
// frames with one write under one deadline, heartbeat timers, and the
// binding's own workers (Go, Pump). Every one of them is joined before
// the connection's Ended runs.
type Conn struct {
	ws  *Socket
	cfg WSConfig
	log zerolog.Logger

	ctx    context.Context // ends every goroutine of the connection
	cancel context.CancelFunc
	out    *queue.Queue[Item]
	// outBytes is the bytes of the messages in out; bytesRoom holds a
	// token when the writer took some (OutboundBytes).
	outBytes  atomic.Int64
	bytesRoom chan struct{}
	// urgent carries a close that skips the queue (shutdown, timeouts):
	// set once, taken by the writer (a pointer, not a channel of one:
	// 8 bytes instead of 144 on every connection).
	urgent    atomic.Pointer[Item]
	urgentOne sync.Once
	urgentSet atomic.Bool

	ready       atomic.Bool  // Ready called: reads are no longer bounded
	beating     atomic.Bool  // StartHeartbeat called
	lastRead    atomic.Int64 // UnixNano of the last message read
	closeQueued atomic.Bool
	serving     atomic.Bool // Serve started: the writer may run
	workers     sync.WaitGroup

	w        wsWriter // the writer's state; writer only
	writing  demand
	wstopped chan struct{} // closed when the writer stopped for good
	handle   func(websocket.MessageType, []byte) bool
	onEnd    func()
	reading  demand // a parked connection's reader

	// life guards the connection's lifecycle: goroutines start (spawn)
	// only before ending; the writer's stop and parking are decided under
	// it so that a parked connection whose writer stops is always ended.
	life      sync.Mutex
	ending    bool          // guarded by life
	wstop     bool          // guarded by life
	parked    bool          // guarded by life
	unparked  atomic.Bool   // moved off the failed poller: its reader reads on
	noPark    bool          // reader only: parking failed once, do not retry
	fd        parkedFD      // its place on the Hub's poller (set up once when parking, under life)
	sc        syscall.Conn  // the parked socket's descriptor; set before poll
	ends      []func(int64) // the OnPark hooks' ends; set when parking
	beatTimer *time.Timer   // guarded by life
	endOnce   sync.Once

	// Heartbeat state: pingSent is the UnixNano of the protocol ping not
	// yet answered (0: none; the pong's reader clears it); lastSeen and
	// quietTicks belong to the frame heartbeat's timer (one run at a time).
	pingSent   atomic.Int64
	lastSeen   int64
	quietTicks int
}

// NewConn wraps an upgraded WebSocket. Serve runs it. ws may be nil for a
// Conn that is never served (tests of a binding's message handling).
func NewConn(ws *Socket, cfg WSConfig) *Conn {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{
		ws: ws, cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel,
		out: queue.New[Item](cfg.Outbound), wstopped: make(chan struct{}), bytesRoom: make(chan struct{}, 1),
	}
	c.w.c = c
	if ws != nil {
		ws.OnPong(func() { c.pingSent.Store(0) })
		ws.msgTimeout = cfg.ReadTimeout
	}
	return c
}

// Context ends when the connection ends (the writer stopped, or the
// connection is ending); workers watch it.
func (c *Conn) Context() context.Context { return c.ctx }

// Ready ends the handshake: reads are no longer bounded by
// HandshakeTimeout, and the connection may park.
func (c *Conn) Ready() { c.ready.Store(true) }

// StartHeartbeat starts the heartbeat (after the dialect's handshake, so
// that the first ping follows the server's greeting). Idempotent.
func (c *Conn) StartHeartbeat() {
	if c.beating.Swap(true) {
		return
	}
	if hb := c.cfg.Heartbeat; hb.Every > 0 && hb.Frame == nil {
		c.armBeat(hb.Every, c.ping)
	}
}

// Go runs f as a worker of the connection: the connection's end waits for
// it. f must return once Context ends. Call it from the reader or another
// worker.
func (c *Conn) Go(f func()) {
	c.workers.Add(1)
	go func() {
		defer c.workers.Done()
		f()
	}()
}

// Run runs f as a worker of the connection, on a reused goroutine when the
// connection parks, unless the connection is ending: false when it did
// not (f then never runs). The connection's end waits for it.
func (c *Conn) Run(f func()) bool { return c.spawn(f) }

// spawn runs f as a worker unless the connection is ending; false when it
// did not.
func (c *Conn) spawn(f func()) bool {
	c.life.Lock()
	defer c.life.Unlock()
	if c.ending {
		return false
	}
	c.workers.Add(1)
	run := func() {
		defer c.workers.Done()
		f()
	}
	if st := c.cfg.Stream; st != nil {
		st.h.wakers.Go(run) // a parked connection's wake-up: a reused goroutine
	} else {
		go run()
	}
	return true
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
	n := int64(len(it.Msg))
	if !c.waitBytes(ctx, n) {
		return false
	}
	c.outBytes.Add(n)
	if c.out.Push(ctx, it) != nil {
		c.tookBytes(n)
		return false
	}
	if c.outBytes.Load() < int64(c.cfg.OutboundBytes) {
		signal(c.bytesRoom) // another waiting sender may fit too
	}
	return true
}

// waitBytes waits until n more bytes fit the outbound byte bound (or
// nothing is queued); false when ctx or the connection ends first.
func (c *Conn) waitBytes(ctx context.Context, n int64) bool {
	limit := int64(c.cfg.OutboundBytes)
	for {
		if cur := c.outBytes.Load(); cur == 0 || cur+n <= limit {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-c.ctx.Done():
			return false
		case <-c.bytesRoom:
		}
	}
}

// tookBytes counts n bytes out of the queue and wakes a waiting sender.
func (c *Conn) tookBytes(n int64) {
	if n > 0 {
		c.outBytes.Add(-n)
		signal(c.bytesRoom)
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
	if c.out.Offer(closeItem(msg, status, reason)) {
		c.outBytes.Add(int64(len(msg)))
		c.closeQueued.Store(true)
		return
	}
	c.CloseNow(status, reason)
}

// CloseNow closes ahead of the queue (after WSConfig.Closing's message);
// safe from any goroutine, effective once.
func (c *Conn) CloseNow(status websocket.StatusCode, reason string) {
	c.closeUrgent(closeItem(nil, status, reason))
}

// closeUrgent queues it ahead of the queue (once) and wakes the writer.
func (c *Conn) closeUrgent(it Item) {
	c.urgentOne.Do(func() {
		c.urgentSet.Store(true)
		c.urgent.Store(&it)
	})
	c.kickWriter()
}

// Serve runs the connection: it reads messages and hands each to handle
// (a new slice for every message: the handler may keep it) until the connection ends or handle returns false (after queueing a
// close), then calls onEnd (the binding stops its subscriptions), lets
// the writer write what is queued up to the close, joins every goroutine
// of the connection, ends the close handshake and runs WSConfig.Ended.
// A connection that parks (WSConfig.Stream) makes Serve return at once;
// the same end then runs on the goroutine that ends it.
func (c *Conn) Serve(handle func(typ websocket.MessageType, data []byte) bool, onEnd func()) {
	c.handle, c.onEnd = handle, onEnd
	now := time.Now().UnixNano()
	c.lastRead.Store(now)
	c.lastSeen = now
	c.serving.Store(true)
	c.out.OnReady(c.kickWriter)
	c.kickWriter() // a close queued before Serve
	if hb := c.cfg.Heartbeat; hb.Every > 0 && hb.Frame != nil {
		c.armBeat(hb.Every, c.beat)
	}
	if c.readLoop() {
		return // parked: the connection ends elsewhere
	}
	c.shut()
}

// readLoop reads until the connection ends (false) or parks (true).
func (c *Conn) readLoop() (parked bool) {
	bounded := false
	for {
		if t := c.cfg.HandshakeTimeout; t > 0 && !c.ready.Load() {
			c.ws.SetReadDeadline(time.Now().Add(t))
			bounded = true
		} else if bounded {
			c.ws.SetReadDeadline(time.Time{})
			bounded = false
		}
		if !c.readOne(false) {
			return false
		}
		if bounded && c.ready.Load() {
			c.ws.SetReadDeadline(time.Time{})
			bounded = false
		}
		if !bounded && c.park() {
			return true
		}
	}
}

// readOne reads one message and hands it over; false when the reading
// ends. parked reads for a connection the poller woke: the whole read is
// bounded by ReadTimeout, and a control frame alone is all it reads
// (nothing to hand over), so that no reader waits for a message after a
// pong.
func (c *Conn) readOne(parked bool) bool {
	var (
		typ  websocket.MessageType
		data []byte
		err  error
	)
	if parked {
		typ, data, err = c.ws.readParked()
	} else {
		typ, data, err = c.ws.ReadMessage()
	}
	if errors.Is(err, errNoMessage) {
		return true
	}
	if err != nil {
		if websocket.CloseStatus(err) == -1 && c.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
			c.log.Debug().Err(err).Msg("transport: websocket read")
		}
		return false
	}
	c.lastRead.Store(time.Now().UnixNano())
	return c.handleSafely(typ, data)
}

// handleSafely hands a message over; a panic in the binding's handler (a
// bug) ends this connection with 1011 internal_error, logged with its stack,
// instead of the process.
func (c *Conn) handleSafely(typ websocket.MessageType, data []byte) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			c.log.Error().Interface("panic", v).Bytes("stack", debug.Stack()).Msg("transport: websocket handler panicked: closing 1011 internal_error")
			c.Close(websocket.StatusInternalError, "internal_error")
			ok = false
		}
	}()
	return c.handle(typ, data)
}

// shut ends the connection once its reader has stopped: onEnd, the
// writer's last words (a queued close) or its stop (the peer left:
// nothing more to say), then no goroutine starts any more, every one is
// joined, the close handshake ends and Ended runs. Once.
func (c *Conn) shut() {
	if c.onEnd != nil {
		c.onEnd()
	}
	if !c.closeQueued.Load() && !c.urgentSet.Load() {
		c.stopWriter()
	}
	<-c.wstopped
	c.join()
	c.ws.Finish()
	if c.cfg.Ended != nil {
		c.cfg.Ended()
	}
}

// stopWriter stops the writer for good (a close was written, a write
// failed and closed the socket, or the reader has stopped): the context
// ends, the queue ends (senders waiting for room return), and a parked
// connection is ended.
func (c *Conn) stopWriter() {
	c.life.Lock()
	if c.wstop {
		c.life.Unlock()
		return
	}
	c.wstop = true
	parked := c.parked
	c.life.Unlock()
	c.cancel()
	c.out.End()
	close(c.wstopped)
	if parked {
		c.endParked()
	}
}

func (c *Conn) timeoutItem(silent time.Duration) Item {
	if f := c.cfg.Heartbeat.OnTimeout; f != nil {
		return closeItem(f(silent))
	}
	return closeItem(nil, websocket.StatusPolicyViolation, "no frame for "+silent.Round(time.Millisecond).String())
}

// armBeat starts the heartbeat timer running f after d, unless the
// connection is ending. f runs as a worker and re-arms it with rearmBeat.
func (c *Conn) armBeat(d time.Duration, f func()) {
	c.life.Lock()
	defer c.life.Unlock()
	if c.ending {
		return
	}
	c.beatTimer = time.AfterFunc(d, func() {
		c.spawnInline(f)
	})
}

// spawnInline runs f on the calling goroutine (a timer's) as a worker,
// unless the connection is ending.
func (c *Conn) spawnInline(f func()) {
	c.life.Lock()
	if c.ending {
		c.life.Unlock()
		return
	}
	c.workers.Add(1)
	c.life.Unlock()
	defer c.workers.Done()
	f()
}

// rearmBeat runs the heartbeat timer again after d.
func (c *Conn) rearmBeat(d time.Duration) {
	c.life.Lock()
	if !c.ending {
		c.beatTimer.Reset(d)
	}
	c.life.Unlock()
}

// ping is the protocol heartbeat, every period: it times the peer out
// when the last ping has gone unanswered for three periods (its timeout
// message and close are queued behind what is queued), and otherwise
// sends a ping when none is outstanding.
func (c *Conn) ping() {
	every := c.cfg.Heartbeat.Every
	now := time.Now()
	c.out.Trim() // empty at a beat: the ring goes until something is queued (a busy connection makes it again at most once a period)
	if sent := c.pingSent.Load(); sent != 0 {
		if silent := now.Sub(time.Unix(0, sent)); silent >= 3*every {
			c.log.Info().Dur("silent", silent).Msg("transport: websocket heartbeat timeout")
			c.SendCtx(c.ctx, c.timeoutItem(3*every))
			return
		}
	} else {
		c.pingSent.Store(now.UnixNano())
		if err := c.ws.Ping(c.cfg.WriteTimeout); err != nil {
			c.writeFailed(err)
			return
		}
	}
	c.rearmBeat(every)
}

// beat is the frame heartbeat, every period from Serve on: a peer silent
// for three periods (and three beats, so that a loaded machine never
// times out a peer it did not ping) is closed ahead of the queue;
// otherwise, once StartHeartbeat was called, the heartbeat frame is
// written.
func (c *Conn) beat() {
	every := c.cfg.Heartbeat.Every
	c.out.Trim() // empty at a beat: the ring goes until something is queued (a busy connection makes it again at most once a period)
	if lr := c.lastRead.Load(); lr != c.lastSeen {
		c.lastSeen, c.quietTicks = lr, 0
	}
	c.quietTicks++
	if silent := time.Since(time.Unix(0, c.lastSeen)); silent > 3*every && c.quietTicks >= 3 {
		c.closeUrgent(c.timeoutItem(silent))
		return
	}
	if c.beating.Load() {
		var buf [128]byte
		if err := c.ws.Write(AppendFrame(buf[:0], opText, c.cfg.Heartbeat.Frame()), c.cfg.WriteTimeout, false); err != nil {
			c.writeFailed(err)
			return
		}
	}
	c.rearmBeat(every)
}

// writeFailed ends the connection after a heartbeat's write failed (the
// socket is shut down): the writer stops for good, which ends a parked
// connection; a reader in Serve reads the end of the socket and returns.
func (c *Conn) writeFailed(err error) {
	c.log.Debug().Err(err).Msg("transport: websocket heartbeat write")
	c.stopWriter()
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
		c.tookBytes(int64(len(it.Msg)))
		out = append(out, it)
	}
}

// Stop ends a Conn that is not served: it cancels its context and waits
// for its workers.
func (c *Conn) Stop() {
	c.out.End()
	c.join()
}

// join ends the context, lets no goroutine of the connection start any
// more (the heartbeat timer stops) and waits for those running.
func (c *Conn) join() {
	c.cancel()
	c.life.Lock()
	c.ending = true
	if c.beatTimer != nil {
		c.beatTimer.Stop()
	}
	c.life.Unlock()
	c.workers.Wait()
}

// signal leaves a token in c unless one is there.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
