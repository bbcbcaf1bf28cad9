package dialectr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/coder/websocket"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// wsSub is one subscription of a connection, served by its pump.
type wsSub struct {
	id     string
	cancel context.CancelFunc
	done   chan struct{}
	// counted: it holds a place of its own under the tenant's stream cap
	// (not the connection's first subscription); finishSub gives it back.
	counted bool
}

// subscribe validates a subscribe frame (AEP-0003 §6.5) and starts its
// pump, or answers with an in-band error frame: a refused subscription
// never closes the connection or disturbs the others. Reader only.
func (c *wsConn) subscribe(f *inFrame) {
	var id string
	if err := json.Unmarshal(f.ID, &id); err != nil || id == "" || len(id) > maxSubID {
		c.refuse("", &reqError{Code: aep.CodeRInvalidFilter, Detail: fmt.Sprintf("subscribe.id must be a non-empty string of at most %d bytes", maxSubID)})
		return
	}
	if c.role == roleEmitter {
		c.refuse(id, &reqError{Code: aep.CodeRUnauthorized, Detail: "this connection said hello as an emitter only"})
		return
	}
	sp, rerr := c.subParams(f)
	if rerr != nil {
		c.refuse(id, rerr)
		return
	}
	c.subsMu.Lock()
	_, dup := c.subs[id]
	n := len(c.subs)
	c.subsMu.Unlock()
	if dup {
		c.refuse(id, invalid("subscription id %q is in use on this connection", id))
		return
	}
	if n >= c.rl.cfg.MaxSubscriptions {
		c.refuse(id, &reqError{Code: aep.CodeRLimitExceeded, Detail: fmt.Sprintf("at most %d subscriptions per connection", c.rl.cfg.MaxSubscriptions)})
		return
	}
	// A subscription beyond the connection's first is a stream of its own
	// under the tenant's cap (it catches up and queues on its own).
	counted := n > 0
	if counted {
		if err := c.rl.hub.Take(c.tenant.String()); err != nil {
			c.refuse(id, &reqError{Code: aep.CodeRLimitExceeded, Detail: "the tenant holds the most streams allowed on this node (--max-streams-per-tenant; every subscription beyond a connection's first counts)"})
			return
		}
	}
	ctx, cancel := context.WithCancel(c.ctx)
	s := &wsSub{id: id, cancel: cancel, done: make(chan struct{}), counted: counted}
	c.subsMu.Lock()
	c.subs[id] = s
	c.subsMu.Unlock()
	c.conn.Go(func() { c.pump(ctx, s, sp) })
}

func (c *wsConn) subParams(f *inFrame) (subParams, *reqError) {
	var sp subParams
	var rerr *reqError
	filter := f.Filter
	if string(filter) == "null" {
		filter = nil
	}
	if sp.filter, rerr = c.rl.parseFilter(filter); rerr != nil {
		return sp, rerr
	}
	if len(f.Capture) > 0 && string(f.Capture) != "null" {
		var capture string
		if err := json.Unmarshal(f.Capture, &capture); err != nil {
			return sp, invalid("capture must be a string: none, metadata, redacted or full")
		}
		if sp.ceiling, rerr = parseCapture(capture); rerr != nil {
			return sp, rerr
		}
	}
	if len(f.From) > 0 && string(f.From) != "null" {
		sp.from, sp.all, rerr = parseFrom(f.From, c.rl.cfg.MaxFrom)
	}
	return sp, rerr
}

func (c *wsConn) refuse(id string, e *reqError) {
	c.send(marshal(errorFrame{Type: "error", ID: id, Code: e.Code, Detail: e.Detail}))
}

// unsubscribe stops a subscription and acknowledges; an unknown id is
// acknowledged too (unsubscribe is idempotent). Reader only.
func (c *wsConn) unsubscribe(f *inFrame) {
	var id string
	if err := json.Unmarshal(f.ID, &id); err != nil {
		return // no id to answer with: ignored
	}
	c.subsMu.Lock()
	s := c.subs[id]
	delete(c.subs, id)
	c.subsMu.Unlock()
	if s != nil {
		s.cancel()
		<-s.done
	}
	c.push(transport.Item{Msg: marshal(idFrame{Type: "unsubscribed", ID: id}), Meta: forget(id)})
}

// stopSubs stops every subscription and waits for their pumps.
func (c *wsConn) stopSubs() {
	c.subsMu.Lock()
	subs := c.subs
	c.subs = map[string]*wsSub{}
	c.subsMu.Unlock()
	for _, s := range subs {
		s.cancel()
	}
	for _, s := range subs {
		<-s.done
	}
}

// finishSub gives back the subscription's place under the stream cap, if
// it took one, and marks it stopped; once, where its pump stops.
func (c *wsConn) finishSub(s *wsSub) {
	if s.counted {
		c.rl.hub.Give(c.tenant.String())
	}
	close(s.done)
}

// forgetSub removes s from the connection's subscriptions if it is still
// there (a pump that could not start).
func (c *wsConn) forgetSub(s *wsSub) {
	c.subsMu.Lock()
	if c.subs[s.id] == s {
		delete(c.subs, s.id)
	}
	c.subsMu.Unlock()
}

// pump resolves the subscription's positions, subscribes and answers
// subscribed (a worker of the connection, for as long as that takes), then
// hands the deliveries to transport.Pump: from there the subscription
// holds a goroutine only while deliveries wait. Ending ctx (unsubscribe,
// the connection's end) closes the engine subscription, which ends the
// pump; s.done is closed when it has stopped.
func (c *wsConn) pump(ctx context.Context, s *wsSub, sp subParams) {
	c.rl.startIndex(ctx, c.tenant.String())
	pl, err := c.rl.planResume(ctx, c.tenant, sp.from, sp.all, false)
	if err != nil {
		c.startFailed(ctx, s, err)
		c.finishSub(s)
		return
	}
	sub, err := c.rl.cfg.Engine.Subscribe(ctx, engine.Request{
		Tenant: c.tenant, Filter: sp.filter, From: pl.from, Queue: c.rl.cfg.Queue, Lossless: true,
	})
	if err != nil {
		c.startFailed(ctx, s, err)
		c.finishSub(s)
		return
	}
	if !c.conn.SendCtx(ctx, transport.Item{Msg: marshal(idFrame{Type: "subscribed", ID: s.id})}) {
		sub.Close()
		c.finishSub(s)
		return
	}
	unhook := context.AfterFunc(ctx, sub.Close)
	gate := pl.gate
	var items []gateItem
	transport.Pump(c.conn, sub.Deliveries(), func(d engine.Delivery) bool {
		if ctx.Err() != nil {
			return false
		}
		if d.CaughtUp() {
			if gate != nil {
				items = gate.flush(items[:0])
				gate = nil
				return c.sendItems(ctx, s.id, sp.ceiling, items)
			}
			return true
		}
		if gate == nil {
			items = append(items[:0], gateItem{ev: d.Event})
		} else {
			items = gate.offer(d.Event, items[:0])
		}
		return c.sendItems(ctx, s.id, sp.ceiling, items)
	}, func(ended bool) {
		if ended && ctx.Err() == nil {
			// The engine closed or the catch-up failed: the subscription
			// cannot go on. Close so the client resumes from its positions.
			if err := sub.Err(); errors.Is(err, engine.ErrClosed) {
				c.closeNow(websocket.StatusGoingAway, "the relay is shutting down; resume from your positions")
			} else {
				if err != nil {
					c.log.Warn().Err(err).Str("sub", s.id).Msg("dialectr: subscription ended")
				}
				c.closeNow(websocket.StatusTryAgainLater, "subscription "+s.id+" ended; resume from your positions")
			}
		}
		unhook()
		sub.Close()
		c.finishSub(s)
	})
}

// sendItems queues what a gate let out: replay-exhausted frames echoing
// the subscription id, and events. False when the subscription or the
// connection ended.
func (c *wsConn) sendItems(ctx context.Context, sub string, ceiling aep.Capture, items []gateItem) bool {
	defer clear(items)
	for _, it := range items {
		if m := it.mark; m != nil {
			ef := exhaustedFrame{Type: "replay-exhausted", Sub: sub, Session: m.Session}
			if m.Earliest != nil {
				ef.Earliest = &earliest{Epoch: m.Earliest.Epoch, Seq: m.Earliest.Seq}
			}
			if !c.conn.SendCtx(ctx, transport.Item{Msg: marshal(ef)}) {
				return false
			}
			continue
		}
		if !readable(c.tenant.Principal(), it.ev) {
			continue
		}
		raw, err := c.rl.eventBytes(it.ev, ceiling)
		if err != nil {
			c.log.Warn().Err(err).Int32("partition", it.ev.Record.Partition).Int64("offset", it.ev.Record.Offset).Msg("dialectr: event not delivered: down-level failed")
			continue
		}
		out := transport.Item{Msg: raw}
		if pos, ok := positionOf(&it.ev.Attrs); ok {
			out.Meta = delivered{sub: sub, pos: pos}
		}
		if !c.conn.SendCtx(ctx, out) {
			return false
		}
	}
	return true
}

// startFailed answers a subscription the log could not serve with the
// closed-set limit-exceeded (the event log is the resource that failed).
func (c *wsConn) startFailed(ctx context.Context, s *wsSub, err error) {
	c.forgetSub(s)
	if ctx.Err() != nil {
		return // unsubscribed or connection ending
	}
	c.log.Error().Err(err).Str("sub", s.id).Msg("dialectr: subscription could not start")
	c.send(marshal(errorFrame{Type: "error", ID: s.id, Code: aep.CodeRLimitExceeded, Detail: "the event log is unavailable; subscribe again later"}))
}
