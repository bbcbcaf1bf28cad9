package dialectr

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// Socket is the WebSocket binding, {base}/socket (AEP-0003 §3.5). Mount it
// with gateway.Server.Mount(aep.DialectR, "/socket", r.Socket()).
func (rl *Relay) Socket() http.Handler { return http.HandlerFunc(rl.serveWS) }

func (rl *Relay) serveWS(w http.ResponseWriter, r *http.Request) {
	tn, _ := tenant.FromContext(r.Context())
	if err := rl.enter(tn.String()); err != nil {
		refuseEntry(w, err)
		return
	}
	defer rl.leave(tn.String())
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: rl.cfg.OriginPatterns})
	if err != nil {
		return // Accept wrote the HTTP error
	}
	limit := int64(rl.cfg.Limits.MaxEventBytes)
	if limit <= 0 {
		limit = 1 << 20
	}
	ws.SetReadLimit(limit + 64<<10)
	c := newWSConn(rl, ws, tn)
	c.serve()
}

// outFrame is one item of a connection's outbound queue.
type outFrame struct {
	msg []byte
	// sub and pos: an event delivered by subscription sub at pos (hasPos).
	sub    string
	pos    cursor.Position
	hasPos bool
	// forget drops the delivered positions of a subscription (unsubscribed).
	forget string
	// close ends the connection after a closing frame (close != 0).
	close  websocket.StatusCode
	reason string
}

// wsConn is one WebSocket connection.
//
// Goroutines: the handler's goroutine reads (serve, readLoop and the frame
// handlers; the hello state is its alone); one writer drains out and pings;
// one pump per subscription moves deliveries into out. serve owns them all
// and joins them before it returns. out is bounded: a pump that finds it
// full waits, its subscription's queue fills, and the engine moves it back
// to reading Kafka (lossless): nothing is dropped.
type wsConn struct {
	rl     *Relay
	ws     *websocket.Conn
	tenant tenant.Tenant
	log    zerolog.Logger

	// ctx ends every goroutine of the connection.
	ctx    context.Context
	cancel context.CancelFunc
	out    chan outFrame
	// urgent carries a close that skips the queue (shutdown, timeout).
	urgent    chan outFrame
	urgentOne sync.Once
	urgentSet atomic.Bool

	// Reader-owned hello state.
	helloDone   bool
	role        string
	closeQueued bool

	greeted    atomic.Bool  // server hello queued: the writer may ping
	lastRead   atomic.Int64 // UnixNano of the last frame read
	workers    sync.WaitGroup
	writerDone chan struct{}

	subsMu sync.Mutex
	subs   map[string]*wsSub // guarded by subsMu
}

func newWSConn(rl *Relay, ws *websocket.Conn, tn tenant.Tenant) *wsConn {
	// Not derived from rl.ctx: on shutdown the connection still sends its
	// closing frame (serve watches rl.ctx).
	ctx, cancel := context.WithCancel(context.Background())
	return &wsConn{
		rl: rl, ws: ws, tenant: tn,
		log: rl.cfg.Logger.With().Stringer("tenant", tn).Str("binding", "r-ws").Logger(),
		ctx: ctx, cancel: cancel,
		out:        make(chan outFrame, rl.cfg.Outbound),
		urgent:     make(chan outFrame, 1),
		writerDone: make(chan struct{}),
		subs:       map[string]*wsSub{},
	}
}

// serve runs the connection until it ends, then stops and joins every
// goroutine it started.
func (c *wsConn) serve() {
	// Shutdown: closing frame with positions, then close 1001.
	stop := context.AfterFunc(c.rl.ctx, func() {
		c.closeNow(websocket.StatusGoingAway, "the relay is shutting down; resume from your positions")
	})
	defer stop()
	c.lastRead.Store(time.Now().UnixNano())
	go c.writer()
	c.readLoop()
	c.stopSubs()
	select {
	case <-c.writerDone: // the writer closed the connection
	default:
		if !c.closeQueued && !c.urgentSet.Load() {
			c.cancel() // the peer left: nothing more to say
		}
	}
	<-c.writerDone
	c.cancel()
	c.workers.Wait()
	_ = c.ws.CloseNow()
}

// readLoop reads and handles frames until the connection ends or a handler
// asks to close it. The writer closes a peer that sends nothing for three
// ping periods (§3.5 rule 5: a peer answers pings); a Read deadline cannot
// do it, because an expired Read context drops the connection at once,
// without the closing frame.
func (c *wsConn) readLoop() {
	for {
		typ, data, err := c.ws.Read(c.ctx)
		if err != nil {
			if websocket.CloseStatus(err) == -1 && c.ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				c.log.Debug().Err(err).Msg("dialectr: websocket read")
			}
			return
		}
		c.lastRead.Store(time.Now().UnixNano())
		if typ != websocket.MessageText {
			c.closeWith(websocket.StatusUnsupportedData, "binary frames are reserved in AEP 0.1 and rejected")
			return
		}
		if !c.handle(data) {
			return
		}
	}
}

// push queues f, waiting for room; false when the connection is ending.
func (c *wsConn) push(f outFrame) bool {
	select {
	case c.out <- f:
		return true
	case <-c.ctx.Done():
		return false
	}
}

func (c *wsConn) send(b []byte) bool { return c.push(outFrame{msg: b}) }

// closeWith queues a closing frame and the close after everything queued
// so far. Reader only.
func (c *wsConn) closeWith(status websocket.StatusCode, reason string) {
	c.closeQueued = true
	c.push(outFrame{close: status, reason: reason})
}

// closeNow closes ahead of the queue (shutdown, timeouts, a subscription
// that cannot continue); safe from any goroutine, effective once.
func (c *wsConn) closeNow(status websocket.StatusCode, reason string) {
	c.urgentOne.Do(func() {
		c.urgentSet.Store(true)
		c.urgent <- outFrame{close: status, reason: reason}
	})
}

// writer writes queued frames in order, pings every period once hello is
// done, tracks the last position delivered per subscription and session,
// and on a close item sends the closing frame (§3.5 rule 4) and closes. It
// cancels ctx when it stops.
func (c *wsConn) writer() {
	defer close(c.writerDone)
	defer c.cancel()
	delivered := map[string]map[string]cursor.Position{}
	var order []string // subscriptions in first-delivery order, for a stable closing frame
	ping := time.NewTicker(c.rl.cfg.Ping)
	defer ping.Stop()
	var lastSeen int64 // lastRead at the previous tick
	quietTicks := 0
	write := func(b []byte) bool {
		ctx, cancel := context.WithTimeout(c.ctx, c.rl.cfg.WriteTimeout)
		defer cancel()
		if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
			c.log.Debug().Err(err).Msg("dialectr: websocket write")
			return false
		}
		return true
	}
	closing := func(f outFrame) {
		cf := closingFrame{Type: "closing", Reason: f.reason, Delivered: []deliveredPos{}}
		for _, sub := range order {
			for _, p := range delivered[sub] {
				cf.Delivered = append(cf.Delivered, deliveredPos{Sub: sub, Session: p.Session, Epoch: p.Epoch, Seq: p.Seq})
			}
		}
		if write(marshal(cf)) {
			_ = c.ws.Close(f.close, truncReason(f.reason))
		}
	}
	for {
		select {
		case <-c.ctx.Done():
			return
		case f := <-c.urgent:
			closing(f)
			return
		case now := <-ping.C:
			// Silence: no frame read for three periods and for three ticks
			// handled here (ticks can be dropped under load; counting them
			// guarantees the peer got at least two pings to answer).
			if lr := c.lastRead.Load(); lr != lastSeen {
				lastSeen, quietTicks = lr, 0
			}
			quietTicks++
			if silent := now.Sub(time.Unix(0, lastSeen)); silent > 3*c.rl.cfg.Ping && quietTicks >= 3 {
				closing(outFrame{close: websocket.StatusPolicyViolation, reason: "no frame for " + silent.Round(time.Millisecond).String()})
				return
			}
			if c.greeted.Load() && !write(marshal(pingFrame{Type: "ping", T: []byte(strconv.FormatInt(time.Now().UnixMilli(), 10))})) {
				return
			}
		case f := <-c.out:
			if f.close != 0 {
				closing(f)
				return
			}
			if f.forget != "" {
				delete(delivered, f.forget)
				for i, s := range order {
					if s == f.forget {
						order = append(order[:i], order[i+1:]...)
						break
					}
				}
			}
			if !write(f.msg) {
				return
			}
			if f.hasPos {
				m := delivered[f.sub]
				if m == nil {
					m = map[string]cursor.Position{}
					delivered[f.sub] = m
					order = append(order, f.sub)
				}
				if _, ok := m[f.pos.Session]; ok || len(m) < DefaultTrackedSessions {
					m[f.pos.Session] = f.pos
				}
			}
		}
	}
}

// truncReason keeps a close reason within the 123 bytes a close frame
// allows.
func truncReason(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}
