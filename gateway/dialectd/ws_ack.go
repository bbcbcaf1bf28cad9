package dialectd

import (
	"context"
	"encoding/json"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
)

// close ends the subscription's engine side; an at_least_once one commits
// and its connection-scoped consumer group is deleted.
func (s *wsSub) close() {
	if s.dur == nil {
		s.sub.Close()
		return
	}
	s.dur.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.e.DeleteGroup(ctx, s.group)
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
	for d := range s.dur.Deliveries().All() {
		if s.cancelled.Load() {
			return
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
			break
		}
		for i, m := range msgs {
			queued := false
			if d.Kind == engine.DurableEvent && i == len(msgs)-1 { // the event itself
				queued = c.pushDelivery(m, d.Event.Record, "ws-durable", d.Sequence, d.Attempt)
			} else {
				queued = c.push(m)
			}
			if !queued {
				return
			}
		}
	}
	c.ended(s, string(last))
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
	for _, s := range c.subs {
		if s.dur != nil {
			durs = append(durs, s.dur)
		}
	}
	c.subsMu.Unlock()
	for _, d := range durs {
		if reject {
			d.Reject(p.AcknowledgedEventID, e.Code, e.Message)
		} else {
			d.Ack(p.AcknowledgedEventID)
		}
	}
}
