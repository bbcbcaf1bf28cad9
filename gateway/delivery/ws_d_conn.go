package delivery

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"
)

// wsOutD is one item of a connection's outbound queue: a text message, or
// (close != 0) the close frame that ends the connection.
type wsOutD struct {
	msg    []byte
	close  websocket.StatusCode
	reason string
}

// wsConnD is one WebSocket connection: one session.
//
// Goroutines: the handler's goroutine reads (serve, and everything it calls:
// the session state is its alone); one writer drains out; one pinger pings;
// one pump per subscription moves deliveries into out. serve owns them all
// and joins them before it returns. out is bounded: a pump that finds it full
// waits, so its subscription's queue fills and the engine drops (best_effort)
// or ends it (replayable) as for any slow consumer.
type wsConnD struct {
	h      *WSHandlerD
	ws     *websocket.Conn
	tenant string
	log    zerolog.Logger

	// ctx ends every goroutine of the connection; the writer cancels it
	// when it stops, and serve when the reader stops.
	ctx    context.Context
	cancel context.CancelFunc
	out    chan wsOutD

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
	subs   map[string]*wsSubD // live subscriptions by id; guarded by subsMu
}

func newWSConnD(h *WSHandlerD, ws *websocket.Conn, tenant string) *wsConnD {
	ctx, cancel := context.WithCancel(context.Background())
	return &wsConnD{
		h: h, ws: ws, tenant: tenant,
		log: h.cfg.Logger.With().Str("tenant", tenant).Str("binding", "ws").Logger(),
		ctx: ctx, cancel: cancel,
		out:        make(chan wsOutD, h.cfg.Outbound),
		writerDone: make(chan struct{}),
		subs:       map[string]*wsSubD{},
	}
}

// serve runs the connection: it starts the writer, reads until the
// connection ends, then ends every subscription and joins every goroutine.
func (c *wsConnD) serve() {
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
		Uint64("acks", c.acks).Uint64("nacks", c.nacks).Msg("delivery: websocket session ended")
}

// readLoop reads and handles messages until the connection ends or a
// handler ends the session.
func (c *wsConnD) readLoop() {
	for {
		ctx, cancel := c.ctx, context.CancelFunc(func() {})
		if !c.ready { // session.opened must come within SetupTimeout
			ctx, cancel = context.WithTimeout(c.ctx, c.h.cfg.SetupTimeout)
		}
		typ, data, err := c.ws.Read(ctx)
		cancel()
		if err != nil {
			if st := websocket.CloseStatus(err); st == -1 && c.ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				c.log.Debug().Err(err).Msg("delivery: websocket read")
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
func (c *wsConnD) push(m []byte) bool {
	select {
	case c.out <- wsOutD{msg: m}:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// closeWith queues the close frame after everything queued so far. Reader
// only.
func (c *wsConnD) closeWith(code websocket.StatusCode, reason string) {
	c.closeQueued = true
	select {
	case c.out <- wsOutD{close: code, reason: reason}:
	case <-c.ctx.Done():
	}
}

// fail sends session.error and queues the close frame. Reader only.
func (c *wsConnD) fail(code, msg string, status websocket.StatusCode) {
	if b, err := c.envelope("session.error", "", wsSessionErrorD{SessionID: c.sessionID, Error: wsErr(code, msg, code == wsCodeInternal || code == wsCodeTimeout)}); err == nil {
		c.push(b)
	}
	c.closeWith(status, code)
}

// goAway closes the connection with 1001 on shutdown, after what is
// queued, or at once when the queue is full; safe from any goroutine.
func (c *wsConnD) goAway() {
	c.goAwayOnce.Do(func() {
		select {
		case c.out <- wsOutD{close: websocket.StatusGoingAway, reason: "server shutting down"}:
		default:
			c.cancel()
		}
	})
}

// writer writes queued messages in order until the close item, a failed
// write, or the end of ctx. It cancels ctx when it stops.
func (c *wsConnD) writer() {
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
				c.log.Debug().Err(err).Msg("delivery: websocket write")
				return
			}
		}
	}
}

// pinger pings every heartbeat interval; a peer that does not answer
// within 3 intervals gets session.error session_timeout and close 1001
// (transport-websocket.md Heartbeat). The reader starts it after
// session.ready.
func (c *wsConnD) pinger(every time.Duration) {
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
			c.log.Info().Err(err).Msg("delivery: websocket heartbeat timeout")
			if b, err := c.envelope("session.error", "", wsSessionErrorD{SessionID: c.sessionID, Error: wsErr(wsCodeTimeout, "no pong within 3 heartbeat intervals", true)}); err == nil {
				c.push(b)
			}
			select {
			case c.out <- wsOutD{close: websocket.StatusGoingAway, reason: "heartbeat timeout"}:
			case <-c.ctx.Done():
			}
		}
		return
	}
}
