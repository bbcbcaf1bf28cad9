package dialectd

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// wsSub is one live subscription of a connection.
type wsSub struct {
	id        string
	dc        *durable.Cluster
	sub       *engine.Subscription   // best_effort, replayable
	dur       *durable.DurableStream // at_least_once
	group     string                 // dur's consumer group, deleted when it ends ("" for an attached durable subscription)
	attached  bool                   // a durable subscription attached by id: acks go through the journal
	st        *streamState
	requested string      // the delivery_mode asked for
	cancelled atomic.Bool // set by the reader before it closes sub
	done      chan struct{}
	// counted: the subscription takes a place of its own under the
	// tenant's stream cap (not the connection's first); given back when
	// its pump stops (finish).
	counted bool
}

type wsSubCreated struct {
	SubscriptionID string          `json:"subscription_id"`
	Filter         json.RawMessage `json:"filter"`
	CreatedAt      string          `json:"created_at"`
	ExpiresAt      *string         `json:"expires_at"`
	DeliveryMode   string          `json:"delivery_mode"`
	// RequestedDeliveryMode is set when the effective mode differs.
	RequestedDeliveryMode string `json:"requested_delivery_mode,omitempty"`
	Note                  string `json:"note,omitempty"`
	// Cursor is the position the subscription starts at.
	Cursor string `json:"cursor,omitempty"`
}

type wsSubRejected struct {
	SubscriptionID string          `json:"subscription_id,omitempty"`
	Filter         json.RawMessage `json:"filter"`
	Error          aep.DError      `json:"error"`
}

// wsReplayed is event.replayed with the subscription it is about.
type wsReplayed struct {
	aep.DReplayed
	SubscriptionID string `json:"subscription_id"`
}

// wsSubReject is why a subscription cannot be created.
type wsSubReject struct {
	code      string // "": subscription_rejected
	msg       string
	details   map[string]string
	retryable bool
}

// subscribe handles subscription.requested.
func (c *wsConn) subscribe(attrs *aep.Attrs, payload json.RawMessage) bool {
	c.nextSub++
	id := fmt.Sprintf("sub_%04d", c.nextSub)
	var s *wsSub
	var created *wsSubCreated
	var rej *wsSubReject
	durable := attachID(payload)
	if durable != "" {
		id = durable
	}
	counted, rej := c.countSub()
	if rej == nil {
		if durable != "" {
			s, created, rej = c.attach(durable)
		} else {
			s, created, rej = c.startSub(id, payload)
		}
		if rej != nil && counted {
			c.h.hub.Give(c.tenant.String())
		}
	}
	if rej != nil {
		filter := json.RawMessage(`{}`)
		if p := bytes.TrimSpace(payload); len(p) > 0 && p[0] == '{' {
			filter = payload
		}
		e := wsErr(cmp.Or(rej.code, aep.CodeDSubscriptionRejected), rej.msg, rej.retryable)
		e.Details = anyDetails(rej.details)
		return c.reply("subscription.rejected", attrs.ID, wsSubRejected{SubscriptionID: id, Filter: filter, Error: e})
	}
	s.counted = counted
	c.subsMu.Lock()
	c.subs[id] = s
	c.subsMu.Unlock()
	// Queued before the pump starts, so it precedes every delivery.
	ok := c.reply("subscription.created", attrs.ID, created)
	c.pump(s)
	return ok
}

// countSub takes a place under the tenant's stream cap for a subscription
// beyond the connection's first (the connection holds one already): each
// subscription catches up and queues on its own, so 32 on one connection
// cost what 32 streams do. True when it took one.
func (c *wsConn) countSub() (bool, *wsSubReject) {
	c.subsMu.Lock()
	n := len(c.subs)
	c.subsMu.Unlock()
	if n == 0 {
		return false, nil
	}
	if err := c.h.hub.Take(c.tenant.String()); err != nil {
		return false, &wsSubReject{msg: "the tenant holds the most streams allowed on this node (--max-streams-per-tenant; every subscription beyond a connection's first counts): " + err.Error(), retryable: true}
	}
	return true, nil
}

// finish gives back the subscription's place under the stream cap; its
// pump calls it once, when it stops.
func (c *wsConn) finish(s *wsSub) {
	if s.counted {
		c.h.hub.Give(c.tenant.String())
	}
	close(s.done)
}

// roomFor is why subscription id cannot be added to the connection: the
// connection has MaxSubscriptions already, or id is live on it (a durable
// subscription attached twice: the second claim would fence the first).
func (c *wsConn) roomFor(id string) *wsSubReject {
	c.subsMu.Lock()
	n := len(c.subs)
	_, dup := c.subs[id]
	c.subsMu.Unlock()
	switch {
	case dup:
		return &wsSubReject{msg: "subscription " + id + " is already attached on this session", details: map[string]string{"subscription_id": id}}
	case n >= c.h.cfg.MaxSubscriptions:
		return &wsSubReject{msg: fmt.Sprintf("too many subscriptions on this connection (at most %d); cancel one first", c.h.cfg.MaxSubscriptions)}
	}
	return nil
}

// startSub validates the filter and starts the engine subscription.
func (c *wsConn) startSub(id string, payload json.RawMessage) (*wsSub, *wsSubCreated, *wsSubReject) {
	if rej := c.roomFor(id); rej != nil {
		return nil, nil, rej
	}
	if len(payload) == 0 {
		payload = json.RawMessage(`null`)
	}
	f, err := filtering.ParseD(payload)
	if err != nil {
		msg, details := rejectionOf(err)
		return nil, nil, &wsSubReject{msg: msg, details: details}
	}
	if msg := scopeRefusal(c.tenant, f); msg != "" {
		return nil, nil, &wsSubReject{code: aep.CodeDUnauthorized, msg: msg}
	}
	st := &streamState{tenant: c.tenant, from: f.FromCursor()}
	requested := f.DeliveryMode()
	switch requested {
	case "":
		st.mode = ModeBestEffort
		if st.from != "" {
			st.mode = ModeReplayable
		}
	case ModeBestEffort:
		if st.from != "" {
			return nil, nil, &wsSubReject{msg: "from_cursor requires delivery_mode replayable", details: map[string]string{"field": "from_cursor"}}
		}
		st.mode = ModeBestEffort
	case ModeAtLeastOnce:
		st.mode = ModeAtLeastOnce
	default:
		st.mode = ModeReplayable
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.h.cfg.SetupTimeout)
	defer cancel()
	if st.state, err = c.h.e.State(ctx, c.tenant); err != nil {
		c.log.Warn().Err(err).Msg("dialectd: websocket topic state")
		return nil, nil, &wsSubReject{msg: "the event log is not available", retryable: true}
	}
	req := engine.Request{Tenant: c.tenant, Filter: f, Queue: c.h.cfg.Queue, Lossless: st.mode == ModeReplayable}
	if st.from != "" {
		cur, err := c.h.kr.Decode(c.tenant.String(), st.from)
		if err != nil {
			det := map[string]string{"field": "from_cursor"}
			var ce *cursor.Error
			if errors.As(err, &ce) {
				det["cursor_error"] = string(ce.Code)
			}
			return nil, nil, &wsSubReject{msg: "the cursor cannot be used: " + err.Error(), details: det}
		}
		var start []cursor.PartitionOffset
		start, st.gaps = st.state.Check(cur)
		req.From, req.Sequence = st.fullFrontier(start), cur.Sequence
	}
	if st.mode == ModeAtLeastOnce {
		return c.startAckSub(ctx, id, f, st, req.From, req.Sequence)
	}
	sub, err := c.h.e.Subscribe(ctx, req)
	if err != nil {
		c.log.Warn().Err(err).Msg("dialectd: websocket subscribe")
		return nil, nil, &wsSubReject{msg: "the subscription could not start", retryable: true}
	}
	if req.From == nil {
		st.frontier = st.fullFrontier(sub.Start())
	} else {
		st.frontier = req.From
	}
	s := &wsSub{id: id, sub: sub, st: st, requested: requested, done: make(chan struct{})}
	created := &wsSubCreated{
		SubscriptionID: id, Filter: json.RawMessage(f.String()),
		CreatedAt: time.Now().UTC().Format(time.RFC3339Nano), DeliveryMode: st.mode,
	}
	if requested != "" && requested != st.mode {
		created.RequestedDeliveryMode = requested
		created.Note = "acknowledgements are not tracked yet: delivery is lossless with cursors; resume from the cursor of the last event you processed"
	}
	if cur, err := st.cursorAt(c.h.kr, req.Sequence); err == nil {
		created.Cursor = cur
	}
	// The encoder (two HMAC states, ~0.5 KB) is made again by the first
	// delivery: a subscription that stays idle does not keep it.
	st.enc = nil
	return s, created, nil
}

// unsubscribe handles subscription.cancelled: it stops the subscription,
// waits until nothing more of it can be queued, then confirms.
func (c *wsConn) unsubscribe(attrs *aep.Attrs, payload json.RawMessage) bool {
	var p struct {
		SubscriptionID string `json:"subscription_id"`
	}
	_ = json.Unmarshal(payload, &p)
	s := c.takeSub(p.SubscriptionID)
	if s == nil {
		return c.reply("event.rejected", attrs.ID, wsEventRejected{
			AcknowledgedEventID: attrs.ID,
			Error:               wsErr(aep.CodeDSubscriptionError, "no live subscription "+strconv.Quote(p.SubscriptionID)+" in this session", false),
		})
	}
	c.stopSub(s)
	return c.reply("subscription.cancelled", attrs.ID, aep.DSubscriptionEnded{SubscriptionID: s.id, Reason: "cancelled"})
}

// takeSub removes and returns the live subscription id, or nil. Whoever
// takes a subscription ends it.
func (c *wsConn) takeSub(id string) *wsSub {
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	s := c.subs[id]
	delete(c.subs, id)
	return s
}

// stopSub ends a taken subscription and waits for its pump.
func (c *wsConn) stopSub(s *wsSub) {
	s.cancelled.Store(true)
	s.close()
	<-s.done
}

// endSubs ends every live subscription (the session is over), once the
// acks read are written and applied.
func (c *wsConn) endSubs() {
	c.pipe.Close() // the events read are written (and answered while the writer runs)
	c.endAcks()
	c.subsMu.Lock()
	subs := make([]*wsSub, 0, len(c.subs))
	for id, s := range c.subs {
		subs = append(subs, s)
		delete(c.subs, id)
	}
	c.subsMu.Unlock()
	for _, s := range subs {
		s.cancelled.Store(true)
		s.close()
	}
}

// pump moves a subscription's deliveries to the outbound queue until the
// subscription ends or the connection does, on a goroutine that runs only
// while deliveries wait (transport.Pump: an idle subscription holds none).
// A subscription that ends on its own (engine closed, a Kafka error, an
// undecodable stored event) is announced with subscription.expired.
func (c *wsConn) pump(s *wsSub) {
	if s.dur != nil {
		c.pumpAck(s)
		return
	}
	var last []byte // cursor of the last queued delivery
	transport.Pump(c.conn, s.sub.Deliveries(), func(d engine.Delivery) bool {
		if s.cancelled.Load() {
			return false
		}
		msg, cur, err := c.encodeDelivery(s, d)
		if err != nil {
			c.log.Error().Err(err).Str("subscription_id", s.id).Msg("dialectd: websocket encode")
			c.ended(s, string(last)) // end it visibly rather than skip an event
			return false
		}
		if msg == nil {
			return true
		}
		queued := false
		if d.Event != nil {
			queued = c.pushDelivery(msg, d.Event.Record, "ws", d.Sequence, 0)
		} else {
			queued = c.push(msg) // a marker
		}
		if queued {
			last = append(last[:0], cur...)
		}
		return queued
	}, func(ended bool) {
		if ended {
			c.ended(s, string(last))
		}
		c.finish(s)
	})
}

// ended announces a subscription that ended on its own with
// subscription.expired, unless it was cancelled or the session ended.
func (c *wsConn) ended(s *wsSub, last string) {
	if s.cancelled.Load() || c.takeSub(s.id) == nil {
		return
	}
	s.close()
	p := aep.DSubscriptionEnded{SubscriptionID: s.id, Cursor: last}
	e := wsErr(aep.CodeDSubscriptionError, "the subscription ended", true)
	switch err := s.err(); {
	case c.goingAway.Load():
		p.Reason = "shutdown"
		switch {
		case s.attached:
			e.Message = "the gateway is shutting down; attach to the subscription again by subscription_id (on any node) to go on where its acknowledgements left it"
		case s.dur != nil:
			e.Message = "the gateway is shutting down; subscribe again with from_cursor set to the cursor of the last event before the oldest one not acknowledged"
		case p.Cursor != "":
			e.Message = "the gateway is shutting down; subscribe again (on any node) with from_cursor set to cursor"
		default:
			e.Message = "the gateway is shutting down; subscribe again on any node"
		}
	case errors.Is(err, engine.ErrClosed):
		p.Reason, e.Message = "shutdown", "the gateway is shutting down"
	default:
		p.Reason = "error"
		c.log.Warn().Err(err).Str("subscription_id", s.id).Bool("at_least_once", s.dur != nil).Msg("dialectd: websocket subscription ended with an error")
		switch {
		case s.attached: // fenced by a newer stream, deleted, or a Kafka error
			e.Message = "the subscription's stream ended here; attach to it again by subscription_id to go on where its acknowledgements left it"
		case s.dur != nil:
			e.Message = "the subscription ended and its acknowledgement state with it; subscribe again with from_cursor set to the cursor of the last event before the oldest one not acknowledged"
		case p.Cursor != "":
			e.Message = "the subscription ended; subscribe again with from_cursor set to the last cursor received"
		}
	}
	p.Error = &e
	if b, err := c.envelope("subscription.expired", "", p); err == nil {
		c.push(b)
	}
}

// encodeDelivery builds the message of one delivery and its cursor (valid
// until the stream's next cursor).
func (c *wsConn) encodeDelivery(s *wsSub, d engine.Delivery) ([]byte, []byte, error) {
	st := s.st
	if d.CaughtUp() && d.Fallback {
		st.advance(d.Frontier)
		return nil, nil, nil // the stream went on without loss: nothing to tell
	}
	if d.CaughtUp() {
		st.advance(d.Frontier)
		cur, err := st.cursorAt(c.h.kr, d.Sequence)
		if err != nil {
			return nil, nil, err
		}
		p := wsReplayed{DReplayed: aep.DReplayed{FromCursor: st.from, ToCursor: cur, EventsReplayed: d.Replayed}, SubscriptionID: s.id}
		for _, g := range st.gaps {
			p.Gaps = append(p.Gaps, aep.DGap{Partition: g.Partition, Requested: g.Requested, RestartAt: g.RestartAt, Reason: g.Reason.String()})
		}
		b, err := c.envelope("event.replayed", "", p)
		return b, []byte(cur), err
	}
	return c.encodeEvent(s, d.Event, st.mode, d.Sequence)
}

// encodeEvent is the message of ev delivered by subscription s in mode with
// seq (its data with the delivery member naming the subscription), and its
// cursor (the stream's scratch: valid until its next cursor).
func (c *wsConn) encodeEvent(s *wsSub, ev *engine.Event, mode string, seq uint64) ([]byte, []byte, error) {
	cur, err := s.st.cursorBytesAfter(c.h.kr, ev, seq)
	if err != nil {
		return nil, nil, err
	}
	b, err := appendEvent(make([]byte, 0, len(ev.Record.Value)+len(cur)+96), ev, mode, seq, cur)
	if err != nil {
		return nil, nil, err
	}
	return wsStampSubscription(b, s.id), cur, nil
}
