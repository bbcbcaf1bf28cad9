package dialectr

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway/ingest"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// Socket is the WebSocket binding, {base}/socket (AEP-0003 §3.5). Mount it
// with gateway.Server.Mount(aep.DialectR, "/socket", r.Socket()).
func (rl *Relay) Socket() http.Handler { return http.HandlerFunc(rl.serveWS) }

func (rl *Relay) serveWS(w http.ResponseWriter, r *http.Request) {
	tn, stream, ok := rl.admit(w, r)
	if !ok {
		return
	}
	limit := int64(rl.cfg.Limits.MaxEventBytes)
	if limit <= 0 {
		limit = 1 << 20
	}
	ws, err := transport.Upgrade(w, r, transport.UpgradeOptions{OriginPatterns: rl.cfg.OriginPatterns, ReadLimit: limit + 64<<10})
	if err != nil {
		stream.Leave()
		return // Upgrade wrote the HTTP error
	}
	c := newWSConn(rl, ws, tn, stream)
	stream.OnShutdown(c.shutdown)
	c.serve() // returns early when the connection parks; its end calls stream.Leave
}

// delivered is the bookkeeping of an event frame: subscription sub
// delivered pos. forget drops a subscription's positions (unsubscribed).
type (
	delivered struct {
		sub string
		pos cursor.Position
	}
	forget string
)

// wsConn is one WebSocket connection, served by a transport.Conn.
//
// Goroutines: the reader (the handler's goroutine until the connection
// parks after hello, then one per frame read; serve, readLoop and the frame
// handlers; the hello state is its alone); the transport's writer drains
// the bounded outbound queue and tracks the positions delivered (written,
// closingFrame: writer only); each subscription's pump (a worker of the
// transport.Conn while it starts, then a transport.Pump that runs only
// while deliveries wait) moves deliveries into the queue. The connection's
// end joins them all. A pump that finds the queue full
// waits, its subscription's queue fills, and the engine moves it back to
// reading Kafka (lossless): nothing is dropped.
type wsConn struct {
	rl     *Relay
	conn   *transport.Conn
	tenant tenant.Tenant
	log    zerolog.Logger
	ctx    context.Context // the connection's: ends when it ends

	id uint64 // unique on this node: names its claims

	// Reader-owned hello state; the claims are the pipe's worker's while
	// it runs (eventWritten) and the reader's after a drain (commands) or
	// the pipe's close (the end).
	helloDone bool
	role      string
	decl      declared            // the hello's identity and declarations
	claimed   map[string]struct{} // sessions this emitter claims
	pres      *presence           // the tenant's, once a session is claimed
	pipe      *ingest.Pipe        // an emitter's events on their way to the log (made at its first)

	// Writer-owned: the last position delivered per subscription and
	// session, subscriptions in first-delivery order.
	positions map[string]map[string]cursor.Position
	order     []string

	subsMu sync.Mutex
	subs   map[string]*wsSub // guarded by subsMu
}

// newWSConn serves ws for tn; stream is its admission, left when the
// connection has ended.
func newWSConn(rl *Relay, ws *transport.Socket, tn tenant.Tenant, stream *transport.Stream) *wsConn {
	c := &wsConn{
		rl: rl, tenant: tn,
		log: rl.wsLogs.Get(tn.String(), func() zerolog.Logger {
			return rl.cfg.Logger.With().Stringer("tenant", tn).Str("binding", "r-ws").Logger()
		}),
		positions: map[string]map[string]cursor.Position{},
		subs:      map[string]*wsSub{},
		id:        rl.connID.Add(1),
		claimed:   map[string]struct{}{},
	}
	c.conn = transport.NewConn(ws, transport.WSConfig{
		Outbound: rl.cfg.Outbound, WriteTimeout: rl.cfg.WriteTimeout,
		// §3.5 rule 5: a ping every period once hello is done; a peer
		// silent for three periods is closed (the transport's default
		// timeout: 1008 "no frame for ...", after the closing frame).
		Heartbeat: transport.Heartbeat{Every: rl.cfg.Ping, Frame: func() []byte {
			return marshal(pingFrame{Type: "ping", T: []byte(strconv.FormatInt(time.Now().UnixMilli(), 10))})
		}},
		Closing: c.closingFrame,
		Written: c.written,
		Logger:  c.log,
		Stream:  stream,
		Ended:   stream.Leave,
	})
	c.ctx = c.conn.Context()
	return c
}

// serve runs the connection until it ends or parks (transport.Conn.Serve);
// at its end every subscription stops and every goroutine is joined.
func (c *wsConn) serve() {
	c.conn.Serve(c.receive, func() {
		c.pipe.Close() // the events read are written (and answered while the writer runs)
		c.stopSubs()
		c.releaseClaims()
	})
}

// receive handles one message; false ends the read loop.
func (c *wsConn) receive(typ websocket.MessageType, data []byte) bool {
	if typ != websocket.MessageText {
		c.closeWith(websocket.StatusUnsupportedData, "binary frames are reserved in AEP 0.1 and rejected")
		return false
	}
	return c.handle(data)
}

// shutdown closes on shutdown: closing frame with positions, then 1001.
func (c *wsConn) shutdown() {
	c.closeNow(websocket.StatusGoingAway, "the relay is shutting down; resume from your positions")
}

// send queues a frame, waiting for room; false when the connection is
// ending.
func (c *wsConn) send(b []byte) bool { return c.conn.Send(b) }

// push queues it, waiting for room; false when the connection is ending.
func (c *wsConn) push(it transport.Item) bool { return c.conn.SendCtx(c.ctx, it) }

// closeWith queues a closing frame and the close after everything queued
// so far. Reader only.
func (c *wsConn) closeWith(status websocket.StatusCode, reason string) { c.conn.Close(status, reason) }

// closeNow closes ahead of the queue (shutdown, a subscription that cannot
// continue); safe from any goroutine, effective once.
func (c *wsConn) closeNow(status websocket.StatusCode, reason string) {
	c.conn.CloseNow(status, reason)
}

// written records what a written frame delivered. Writer only.
func (c *wsConn) written(meta any) {
	switch m := meta.(type) {
	case forget:
		delete(c.positions, string(m))
		c.order = slices.DeleteFunc(c.order, func(s string) bool { return s == string(m) })
	case delivered:
		ps := c.positions[m.sub]
		if ps == nil {
			ps = map[string]cursor.Position{}
			c.positions[m.sub] = ps
			c.order = append(c.order, m.sub)
		}
		if _, ok := ps[m.pos.Session]; ok || len(ps) < DefaultTrackedSessions {
			ps[m.pos.Session] = m.pos
		}
	}
}

// closingFrame is the frame written before every close (§3.5 rule 4): the
// last position delivered per subscription and session. Writer only.
func (c *wsConn) closingFrame(reason string) []byte {
	cf := closingFrame{Type: "closing", Reason: reason, Delivered: []deliveredPos{}}
	for _, sub := range c.order {
		for _, p := range c.positions[sub] {
			cf.Delivered = append(cf.Delivered, deliveredPos{Sub: sub, Session: p.Session, Epoch: p.Epoch, Seq: p.Seq})
		}
	}
	return marshal(cf)
}
