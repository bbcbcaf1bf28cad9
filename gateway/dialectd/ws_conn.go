package dialectd

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// wsOut is one item of a connection's outbound queue: a text message, or
// (close != 0) the close frame that ends the connection.
type wsOut struct {
	msg    []byte
	close  websocket.StatusCode
	reason string
}

// wsConn is one WebSocket connection: one session.
//
// Goroutines: the handler's goroutine reads (serve, and everything it calls:
// the session state is its alone); one writer drains out; one pinger pings;
// one pump per subscription moves deliveries into out. serve owns them all
// and joins them before it returns. out is bounded: a pump that finds it full
// waits, so its subscription's queue fills and the engine drops (best_effort)
// or ends it (replayable) as for any slow consumer.
type wsConn struct {
	h      *WSHandler
	ws     *websocket.Conn
	tenant tenant.Tenant
	log    zerolog.Logger

	// ctx ends every goroutine of the connection; the writer cancels it
	// when it stops, and serve when the reader stops.
	ctx    context.Context
	cancel context.CancelFunc
	out    chan wsOut

	// Session state, written by the reader only. sessionID and peer are
	// set once, before ready, and only read by the goroutines started
	// after ready (pinger, pumps).
	sessionID   string
	peer        string // the client's source: the target of our envelopes
	ready       bool
	nextSub     uint64
	acks, nacks uint64 // event.acknowledged / event.rejected received
	published   uint64
	closeQueued bool

	workers    sync.WaitGroup // pinger and pumps
	writerDone chan struct{}
	goAwayOnce sync.Once

	subsMu sync.Mutex
	subs   map[string]*wsSub // live subscriptions by id; guarded by subsMu
}

func newWSConn(h *WSHandler, ws *websocket.Conn, tn tenant.Tenant) *wsConn {
	ctx, cancel := context.WithCancel(context.Background())
	return &wsConn{
		h: h, ws: ws, tenant: tn,
		log: h.cfg.Logger.With().Stringer("tenant", tn).Str("binding", "ws").Logger(),
		ctx: ctx, cancel: cancel,
		out:        make(chan wsOut, h.cfg.Outbound),
		writerDone: make(chan struct{}),
		subs:       map[string]*wsSub{},
	}
}

// serve runs the connection: it starts the writer, reads until the
// connection ends, then ends every subscription and joins every goroutine.
func (c *wsConn) serve() {
	go c.writer()
	c.readLoop()
	c.endSubs()
	if !c.closeQueued {
		c.cancel() // nothing more to say: stop the writer now
	}
	<-c.writerDone
	c.cancel()
	c.workers.Wait()
	_ = c.ws.CloseNow()
	c.log.Debug().Str("session_id", c.sessionID).Uint64("published", c.published).
		Uint64("acks", c.acks).Uint64("nacks", c.nacks).Msg("dialectd: websocket session ended")
}

// readLoop reads and handles messages until the connection ends or a
// handler ends the session.
func (c *wsConn) readLoop() {
	for {
		ctx, cancel := c.ctx, context.CancelFunc(func() {})
		if !c.ready { // session.opened must come within SetupTimeout
			ctx, cancel = context.WithTimeout(c.ctx, c.h.cfg.SetupTimeout)
		}
		typ, data, err := c.ws.Read(ctx)
		cancel()
		if err != nil {
			if st := websocket.CloseStatus(err); st == -1 && c.ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				c.log.Debug().Err(err).Msg("dialectd: websocket read")
			}
			return
		}
		if typ != websocket.MessageText {
			c.fail(wsCodeProtocol, "only text frames are allowed, one JSON event per message", websocket.StatusProtocolError)
			return
		}
		if !c.handle(data) {
			return
		}
	}
}

// push queues m, waiting for room; false when the connection is ending.
func (c *wsConn) push(m []byte) bool {
	select {
	case c.out <- wsOut{msg: m}:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// closeWith queues the close frame after everything queued so far. Reader
// only.
func (c *wsConn) closeWith(code websocket.StatusCode, reason string) {
	c.closeQueued = true
	select {
	case c.out <- wsOut{close: code, reason: reason}:
	case <-c.ctx.Done():
	}
}

// fail sends session.error and queues the close frame. Reader only.
func (c *wsConn) fail(code, msg string, status websocket.StatusCode) {
	if b, err := c.envelope("session.error", "", wsSessionError{SessionID: c.sessionID, Error: wsErr(code, msg, code == wsCodeInternal || code == wsCodeTimeout)}); err == nil {
		c.push(b)
	}
	c.closeWith(status, code)
}

// goAway closes the connection with 1001 on shutdown, after what is
// queued, or at once when the queue is full; safe from any goroutine.
func (c *wsConn) goAway() {
	c.goAwayOnce.Do(func() {
		select {
		case c.out <- wsOut{close: websocket.StatusGoingAway, reason: "server shutting down"}:
		default:
			c.cancel()
		}
	})
}

// writer writes queued messages in order until the close item, a failed
// write, or the end of ctx. It cancels ctx when it stops.
func (c *wsConn) writer() {
	defer close(c.writerDone)
	defer c.cancel()
	for {
		select {
		case <-c.ctx.Done():
			return
		case o := <-c.out:
			if o.close != 0 {
				_ = c.ws.Close(o.close, o.reason)
				return
			}
			ctx, cancel := context.WithTimeout(c.ctx, c.h.cfg.WriteTimeout)
			err := c.ws.Write(ctx, websocket.MessageText, o.msg)
			cancel()
			if err != nil {
				c.log.Debug().Err(err).Msg("dialectd: websocket write")
				return
			}
		}
	}
}

// pinger pings every heartbeat interval; a peer that does not answer
// within 3 intervals gets session.error session_timeout and close 1001
// (transport-websocket.md Heartbeat). The reader starts it after
// session.ready.
func (c *wsConn) pinger(every time.Duration) {
	defer c.workers.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(c.ctx, 3*every)
		err := c.ws.Ping(ctx)
		cancel()
		if err == nil {
			continue
		}
		if c.ctx.Err() == nil {
			c.log.Info().Err(err).Msg("dialectd: websocket heartbeat timeout")
			if b, err := c.envelope("session.error", "", wsSessionError{SessionID: c.sessionID, Error: wsErr(wsCodeTimeout, "no pong within 3 heartbeat intervals", true)}); err == nil {
				c.push(b)
			}
			select {
			case c.out <- wsOut{close: websocket.StatusGoingAway, reason: "heartbeat timeout"}:
			case <-c.ctx.Done():
			}
		}
		return
	}
}
