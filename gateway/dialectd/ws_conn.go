package dialectd

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/ingest"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/internal/tracing"
)

// wsConn is one WebSocket connection: one session, served by a
// transport.Conn.
//
// Goroutines: the handler's goroutine reads (serve, and everything it calls:
// the session state is its alone); the transport's writer drains the
// bounded outbound queue; its heartbeat timer pings (a goroutine only while a ping waits for its pong); one pump per subscription
// (a worker of the transport.Conn) moves deliveries into the queue; one
// more pump writes the acks read (wsAcker: only while acks wait). serve
// joins them all before it returns. A pump that finds the queue full
// waits, so its subscription's queue fills and the engine drops
// (best_effort) or moves it back to reading Kafka (replayable) as for any
// slow consumer.
type wsConn struct {
	h      *WSHandler
	conn   *transport.Conn
	tenant tenant.Tenant
	log    zerolog.Logger
	ctx    context.Context // the connection's: ends when it ends

	// Session state, written by the reader only. sessionID and peer are
	// set once, before ready, and only read by the goroutines started
	// after ready (pings, pumps).
	sessionID   string
	peer        string // the client's source: the target of our envelopes
	ready       bool
	nextSub     uint64
	acks, nacks uint64                  // event.acknowledged / event.rejected received
	published   uint64                  // the pipe's worker's (read once it is closed)
	pipe        *ingest.Pipe            // the events the client publishes, on their way to the log (made at the first)
	ackq        atomic.Pointer[wsAcker] // writes the acks; nil until the first one (set by the reader, read by endSubs too)

	subsMu sync.Mutex
	subs   map[string]*wsSub // live subscriptions by id; guarded by subsMu

	goingAway atomic.Bool // the gateway is shutting down: subscriptions end with reason shutdown
}

// newWSConn serves ws for tn; stream (nil in tests that never serve) is
// its admission, left when the connection has ended.
func newWSConn(h *WSHandler, ws *transport.Socket, tn tenant.Tenant, stream *transport.Stream) *wsConn {
	c := &wsConn{
		h: h, tenant: tn,
		log: h.logs.Get(tn.String(), func() zerolog.Logger {
			return h.cfg.Logger.With().Stringer("tenant", tn).Str("binding", "ws").Logger()
		}),
		subs: map[string]*wsSub{},
	}
	hb := transport.Heartbeat{}
	if h.cfg.Heartbeat > 0 {
		// transport-websocket.md Heartbeat: a peer that has not answered a
		// ping within 3 intervals gets session_timeout and 1001.
		hb = transport.Heartbeat{Every: h.cfg.Heartbeat, OnTimeout: func(time.Duration) ([]byte, websocket.StatusCode, string) {
			b, _ := c.envelope("session.error", "", wsSessionError{SessionID: c.sessionID, Error: wsErr(wsCodeTimeout, "no pong within 3 heartbeat intervals", true)})
			return b, websocket.StatusGoingAway, "heartbeat timeout"
		}}
	}
	c.conn = transport.NewConn(ws, transport.WSConfig{
		Outbound: h.cfg.Outbound, WriteTimeout: h.cfg.WriteTimeout, HandshakeTimeout: h.cfg.SetupTimeout,
		Heartbeat: hb, Logger: c.log, Written: writtenMeta,
		Stream: stream, Ended: func() {
			c.log.Debug().Str("session_id", c.sessionID).Uint64("published", c.published).
				Uint64("acks", c.acks).Uint64("nacks", c.nacks).Msg("dialectd: websocket session ended")
			if stream != nil {
				stream.Leave()
			}
		},
	})
	c.ctx = c.conn.Context()
	return c
}

// serve runs the connection until it ends or parks (transport.Conn.Serve);
// at its end every subscription ends, every goroutine is joined and the
// session's summary is logged.
func (c *wsConn) serve() { c.conn.Serve(c.receive, c.endSubs) }

// receive handles one message; false ends the read loop (the close frame
// is queued).
func (c *wsConn) receive(typ websocket.MessageType, data []byte) bool {
	if typ != websocket.MessageText {
		c.fail(wsCodeProtocol, "only text frames are allowed, one JSON event per message", websocket.StatusProtocolError)
		return false
	}
	return c.handle(data)
}

// push queues m, waiting for room; false when the connection is ending.
func (c *wsConn) push(m []byte) bool { return c.conn.Send(m) }

// pushDelivery is push for the message of a delivery of r: with tracing on,
// the delivery's span ends when the writer has written it.
func (c *wsConn) pushDelivery(m []byte, r *kgo.Record, stream string, seq uint64, attempt int) bool {
	if !tracing.On() {
		return c.push(m)
	}
	return c.conn.SendCtx(c.ctx, transport.Item{Msg: m, Meta: tracing.StartDelivery(r, stream, c.tenant.String(), seq, attempt)})
}

// closeWith queues the close frame after everything queued so far. Reader
// only.
func (c *wsConn) closeWith(code websocket.StatusCode, reason string) { c.conn.Close(code, reason) }

// fail sends session.error and queues the close frame. Reader only.
func (c *wsConn) fail(code, msg string, status websocket.StatusCode) {
	e := wsErr(code, msg, code == wsCodeInternal || code == wsCodeTimeout)
	if code == aep.CodeDUnsupportedVersion {
		// versioning.md: the refusal lists the versions accepted
		e.Details = map[string]any{"supported": aep.SupportedVersions(aep.DialectD)}
	}
	if b, err := c.envelope("session.error", "", wsSessionError{SessionID: c.sessionID, Error: e}); err == nil {
		c.push(b)
	}
	c.closeWith(status, code)
}

// goAwayWait bounds how long a shutdown waits for the subscriptions'
// pumps to queue their subscription.expired before the close.
const goAwayWait = time.Second

// goAway ends the connection on shutdown: every live subscription ends
// with subscription.expired (reason shutdown, its last cursor and how to
// resume, the way a dialect R client hears "closing" with its positions),
// then 1001 after what is queued, or at once when the queue is full. Safe
// from any goroutine and idempotent; the waiting happens on a goroutine of
// its own that ends with the close (at most goAwayWait).
func (c *wsConn) goAway() {
	if !c.goingAway.CompareAndSwap(false, true) {
		return
	}
	c.subsMu.Lock()
	subs := make([]*wsSub, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	c.subsMu.Unlock()
	go func() {
		for _, s := range subs {
			s.close() // its pump drains what is queued, then announces the end
		}
		t := time.NewTimer(goAwayWait)
		defer t.Stop()
	wait:
		for _, s := range subs {
			select {
			case <-s.done:
			case <-t.C:
				break wait
			case <-c.ctx.Done():
				break wait
			}
		}
		c.conn.CloseAfter(nil, websocket.StatusGoingAway, "server shutting down")
	}()
}
