package dialectd

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// close ends the subscription's engine side; an at_least_once one commits
// and its connection-scoped consumer group is deleted.
func (s *wsSub) close() {
	if s.dur == nil {
		s.sub.Close()
		return
	}
	s.dur.Close()
	if s.group == "" {
		return // an attached durable subscription outlives the connection
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.e.DeleteGroup(ctx, s.group)
}

// attachID is the id of a durable subscription (POST /aep/subscriptions)
// that a subscription.requested payload {"subscription_id": "sub_<ULID>"}
// attaches the session to, or "".
func attachID(payload json.RawMessage) string {
	var p struct {
		SubscriptionID string `json:"subscription_id"`
	}
	if json.Unmarshal(payload, &p) != nil || !strings.HasPrefix(p.SubscriptionID, "sub_") || len(p.SubscriptionID) != len("sub_")+ulid.EncodedSize {
		return ""
	}
	return p.SubscriptionID
}

// attach opens the stream of the durable subscription id on this
// connection, under the same claim and lease rules as its SSE stream (the
// newest stream wins, on any node); acks and rejections sent on the socket
// go through the tenant's journal.
func (c *wsConn) attach(id string) (*wsSub, *wsSubCreated, *wsSubReject) {
	ctx, cancel := context.WithTimeout(c.ctx, c.h.cfg.SetupTimeout+engine.LeaseTTL)
	defer cancel()
	defs, err := c.h.e.Subscriptions(ctx, c.tenant)
	if err != nil {
		c.log.Warn().Err(err).Msg("dialectd: websocket attach")
		return nil, nil, &wsSubReject{msg: "the subscription store is not available", retryable: true}
	}
	def, ok := defs[id]
	det := map[string]string{"subscription_id": id}
	switch {
	case !ok:
		return nil, nil, &wsSubReject{msg: "no durable subscription " + id, details: det}
	case def.Expired(time.Now()):
		return nil, nil, &wsSubReject{msg: "subscription " + id + " expired", details: det}
	}
	f, err := filtering.ParseD(def.Filter)
	if err != nil {
		return nil, nil, &wsSubReject{msg: "the stored subscription is unreadable", details: det}
	}
	st := &streamState{tenant: c.tenant, mode: ModeAtLeastOnce}
	if st.state, err = c.h.e.State(ctx, c.tenant); err != nil {
		return nil, nil, &wsSubReject{msg: "the event log is not available", retryable: true}
	}
	req := engine.DurableRequest{
		Tenant: c.tenant, SubscriptionID: id, Group: engine.SubscriptionGroup(c.tenant, id), Filter: f,
		Policy: policyOf(c.h.cfg.AckPolicy, def), Queue: c.h.cfg.Queue, DeadLetter: encodeDeadLetter,
		MaxAckPending: def.MaxAckPending,
	}
	if def.ExpiresAt != nil {
		req.ExpiresAt = *def.ExpiresAt
	}
	dur, err := c.h.e.OpenDurable(ctx, req)
	if err != nil {
		var held *engine.HeldError
		if errors.As(err, &held) {
			det["holder"] = held.Node
		}
		c.log.Warn().Err(err).Str("subscription_id", id).Msg("dialectd: websocket attach")
		return nil, nil, &wsSubReject{msg: "the subscription's stream could not be claimed: " + err.Error(), details: det, retryable: true}
	}
	st.frontier = st.fullFrontier(nil)
	s := &wsSub{id: id, e: c.h.e, dur: dur, st: st, requested: ModeAtLeastOnce, attached: true, done: make(chan struct{})}
	created := &wsSubCreated{SubscriptionID: id, Filter: def.Filter, CreatedAt: def.CreatedAt.Format(time.RFC3339Nano), DeliveryMode: ModeAtLeastOnce}
	return s, created, nil
}

// err is why the subscription ended.
func (s *wsSub) err() error {
	if s.dur != nil {
		return s.dur.Err()
	}
	return s.sub.Err()
}

// startAckSub starts an at_least_once subscription of the connection: a
// engine.DurableStream on a consumer group of its own ("aep.<tenant>.ws.<ULID>")
// whose start is committed first (the end offsets, or from_cursor's checked
// position). Acks and rejections arrive over the socket (settle).
func (c *wsConn) startAckSub(ctx context.Context, id string, f *filtering.Filter, st *streamState, from []cursor.PartitionOffset, seq uint64) (*wsSub, *wsSubCreated, *wsSubReject) {
	start := from
	if start == nil {
		start = st.fullFrontier(nil)
	}
	group := "aep." + c.tenant.String() + ".ws." + ulid.Make().String()
	if err := c.h.e.CommitStart(ctx, c.tenant, group, st.state, start); err != nil {
		c.log.Warn().Err(err).Msg("dialectd: websocket at_least_once start")
		return nil, nil, &wsSubReject{msg: "the subscription could not start", retryable: true}
	}
	dur, err := c.h.e.OpenDurable(ctx, engine.DurableRequest{
		Tenant: c.tenant, SubscriptionID: id, Group: group, Filter: f, Policy: c.h.cfg.AckPolicy,
		Queue: c.h.cfg.Queue, Sequence: seq, DeadLetter: encodeDeadLetter,
	})
	if err != nil {
		c.log.Warn().Err(err).Msg("dialectd: websocket at_least_once open")
		return nil, nil, &wsSubReject{msg: "the subscription could not start", retryable: true}
	}
	st.frontier = append([]cursor.PartitionOffset(nil), start...)
	s := &wsSub{id: id, e: c.h.e, dur: dur, group: group, st: st, requested: ModeAtLeastOnce, done: make(chan struct{})}
	created := &wsSubCreated{
		SubscriptionID: id, Filter: json.RawMessage(f.String()),
		CreatedAt: time.Now().UTC().Format(time.RFC3339Nano), DeliveryMode: ModeAtLeastOnce,
	}
	if cur, err := st.cursorAt(c.h.kr, seq); err == nil {
		created.Cursor = cur
	}
	return s, created, nil
}

// pumpAck moves an at_least_once subscription's deliveries to the outbound
// queue: a redelivery is event.redelivered then the event, a dead letter
// event.dead_lettered.
func (c *wsConn) pumpAck(s *wsSub) {
	var last []byte // cursor of the last queued delivery
	transport.Pump(c.conn, s.dur.Deliveries(), func(d engine.DurableDelivery) bool {
		if s.cancelled.Load() {
			return false
		}
		var msgs [][]byte
		var err error
		switch {
		case d.Kind == engine.DurableDeadLettered:
			var b []byte
			if b, err = c.envelope("event.dead_lettered", "", deadLettered(*d.DeadLetter)); err == nil {
				msgs = append(msgs, b)
			}
		default:
			if d.Attempt > 1 {
				var b []byte
				if b, err = c.envelope("event.redelivered", "", aep.DRedelivered{OriginalEventID: d.Event.Attrs.ID, Attempt: d.Attempt, SubscriptionID: s.id}); err == nil {
					msgs = append(msgs, b)
				}
			}
			if err == nil {
				var b, cur []byte
				if b, cur, err = c.encodeAckEvent(s, d); err == nil {
					msgs = append(msgs, b)
					last = append(last[:0], cur...)
				}
			}
		}
		if err != nil {
			c.log.Error().Err(err).Str("subscription_id", s.id).Msg("dialectd: websocket encode")
			c.ended(s, string(last))
			return false
		}
		for i, m := range msgs {
			queued := false
			if d.Kind == engine.DurableEvent && i == len(msgs)-1 { // the event itself
				queued = c.pushHanded(m, s.dur, d)
			} else {
				queued = c.push(m)
			}
			if !queued {
				return false
			}
		}
		return true
	}, func(ended bool) {
		if ended {
			c.ended(s, string(last))
		}
		close(s.done)
	})
}

func (c *wsConn) encodeAckEvent(s *wsSub, d engine.DurableDelivery) ([]byte, []byte, error) {
	return c.encodeEvent(s, d.Event, ModeAtLeastOnce, d.Sequence)
}

// settle feeds event.acknowledged / event.rejected from the socket to every
// at_least_once subscription of the connection (the message names the
// event, not the subscription). Nothing is answered: an unknown or
// duplicate ack is harmless.
func (c *wsConn) settle(payload json.RawMessage, reject bool) {
	var p struct {
		AcknowledgedEventID string      `json:"acknowledged_event_id"`
		Error               *aep.DError `json:"error"`
	}
	if json.Unmarshal(payload, &p) != nil || p.AcknowledgedEventID == "" {
		return
	}
	e := aep.DError{Code: aep.CodeDTaskError, Message: "rejected by the consumer"}
	if p.Error != nil && p.Error.Code != "" {
		e = *p.Error
	}
	c.subsMu.Lock()
	var durs []*engine.DurableStream
	var attached []string
	for _, s := range c.subs {
		if s.dur != nil {
			durs = append(durs, s.dur)
		}
		if s.attached {
			attached = append(attached, s.id)
		}
	}
	c.subsMu.Unlock()
	// an attached durable subscription's acks are made durable in the
	// journal, for whichever node streams it next (applied here below)
	for _, id := range attached {
		ctx, cancel := context.WithTimeout(c.ctx, c.h.cfg.SetupTimeout)
		var err error
		if reject {
			err = c.h.e.JournalAcks(ctx, c.tenant, id, nil, []engine.Rejection{{Code: e.Code, Message: e.Message}}, []string{p.AcknowledgedEventID})
		} else {
			err = c.h.e.JournalAcks(ctx, c.tenant, id, []string{p.AcknowledgedEventID}, nil, nil)
		}
		cancel()
		if err != nil {
			c.log.Warn().Err(err).Str("subscription_id", id).Msg("dialectd: websocket ack to the journal")
		}
	}
	for _, d := range durs {
		if reject {
			d.Reject(p.AcknowledgedEventID, e.Code, e.Message)
		} else {
			d.Ack(p.AcknowledgedEventID)
		}
	}
}
