package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/filtering"
)

// close ends the subscription's engine side; an at_least_once one commits
// and its connection-scoped consumer group is deleted.
func (s *wsSubD) close() {
	if s.dur == nil {
		s.sub.Close()
		return
	}
	s.dur.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = s.dur.e.adm.DeleteGroups(ctx, s.group) // best effort: an empty group expires by itself
}

// err is why the subscription ended.
func (s *wsSubD) err() error {
	if s.dur != nil {
		return s.dur.Err()
	}
	return s.sub.Err()
}

// startAckSub starts an at_least_once subscription of the connection: a
// DurableStream on a consumer group of its own ("aep.<tenant>.ws.<ULID>")
// whose start is committed first (the end offsets, or from_cursor's checked
// position). Acks and rejections arrive over the socket (settle).
func (c *wsConnD) startAckSub(ctx context.Context, id string, f *filtering.Filter, st *streamD, from []cursor.PartitionOffset, seq uint64) (*wsSubD, *wsSubCreatedD, *wsSubReject) {
	start := from
	if start == nil {
		start = st.fullFrontier(nil)
	}
	group := "aep." + c.tenant + ".ws." + ulid.Make().String()
	if err := c.h.e.CommitStart(ctx, c.tenant, group, st.state, start); err != nil {
		c.log.Warn().Err(err).Msg("delivery: websocket at_least_once start")
		return nil, nil, &wsSubReject{msg: "the subscription could not start", retryable: true}
	}
	dur, err := c.h.e.OpenDurable(ctx, DurableRequest{
		Tenant: c.tenant, SubscriptionID: id, Group: group, Filter: f, Policy: c.h.cfg.AckPolicy,
		Queue: c.h.cfg.Queue, Sequence: seq,
	})
	if err != nil {
		c.log.Warn().Err(err).Msg("delivery: websocket at_least_once open")
		return nil, nil, &wsSubReject{msg: "the subscription could not start", retryable: true}
	}
	st.frontier = append([]cursor.PartitionOffset(nil), start...)
	s := &wsSubD{id: id, dur: dur, group: group, st: st, requested: ModeAtLeastOnce, done: make(chan struct{})}
	created := &wsSubCreatedD{
		SubscriptionID: id, Filter: json.RawMessage(f.String()),
		CreatedAt: time.Now().UTC().Format(time.RFC3339Nano), DeliveryMode: ModeAtLeastOnce,
	}
	if cur, err := c.h.sse.cursorAt(st, seq); err == nil {
		created.Cursor = cur
	}
	return s, created, nil
}

// pumpAck moves an at_least_once subscription's deliveries to the outbound
// queue: a redelivery is event.redelivered then the event, a dead letter
// event.dead_lettered.
func (c *wsConnD) pumpAck(s *wsSubD) {
	var last string
	for d := range s.dur.C() {
		if s.cancelled.Load() {
			return
		}
		var msgs [][]byte
		var err error
		switch {
		case d.Kind == DurableDeadLettered:
			var b []byte
			if b, err = c.envelope("event.dead_lettered", "", d.dead); err == nil {
				msgs = append(msgs, b)
			}
		default:
			if d.Attempt > 1 {
				var b []byte
				if b, err = c.envelope("event.redelivered", "", redeliveredD{OriginalEventID: d.Event.Attrs.ID, Attempt: d.Attempt, SubscriptionID: s.id}); err == nil {
					msgs = append(msgs, b)
				}
			}
			if err == nil {
				var b []byte
				if b, last, err = c.encodeAckEvent(s, d); err == nil {
					msgs = append(msgs, b)
				}
			}
		}
		if err != nil {
			c.log.Error().Err(err).Str("subscription_id", s.id).Msg("delivery: websocket encode")
			break
		}
		for _, m := range msgs {
			if !c.push(m) {
				return
			}
		}
	}
	c.ended(s, last)
}

func (c *wsConnD) encodeAckEvent(s *wsSubD, d DurableDelivery) ([]byte, string, error) {
	st := s.st
	r := d.Event.Record
	if int(r.Partition) < len(st.frontier) && r.Offset+1 > st.frontier[r.Partition].Offset {
		st.frontier[r.Partition].Offset = r.Offset + 1
	}
	cur, err := c.h.sse.cursorAt(st, d.Sequence)
	if err != nil {
		return nil, "", err
	}
	b, ok := appendDataD(make([]byte, 0, len(r.Value)+len(cur)+96), r.Value, ModeAtLeastOnce, d.Sequence, cur)
	if !ok {
		return nil, "", fmt.Errorf("stored event is not a JSON object at partition %d offset %d", r.Partition, r.Offset)
	}
	return wsStampSubscription(b, s.id), cur, nil
}

// settle feeds event.acknowledged / event.rejected from the socket to every
// at_least_once subscription of the connection (the message names the
// event, not the subscription). Nothing is answered: an unknown or
// duplicate ack is harmless.
func (c *wsConnD) settle(payload json.RawMessage, reject bool) {
	var p struct {
		AcknowledgedEventID string  `json:"acknowledged_event_id"`
		Error               *errorD `json:"error"`
	}
	if json.Unmarshal(payload, &p) != nil || p.AcknowledgedEventID == "" {
		return
	}
	e := errorD{Code: aep.CodeDTaskError, Message: "rejected by the consumer"}
	if p.Error != nil && p.Error.Code != "" {
		e = *p.Error
	}
	c.subsMu.Lock()
	var durs []*DurableStream
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
