package dialectd

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/durable"
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
	deleteGroup(s.dc, s.group)
}

// deleteGroup deletes an ad-hoc subscription's consumer group (bounded:
// the connection may be gone, the broker slow).
func deleteGroup(e *durable.Cluster, group string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e.DeleteGroup(ctx, group)
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
	if rej := c.roomFor(id); rej != nil {
		return nil, nil, rej
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.h.cfg.SetupTimeout+durable.LeaseTTL)
	defer cancel()
	defs, err := c.h.dc.Subscriptions(ctx, c.tenant)
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
	if msg := scopeRefusal(c.tenant, f); msg != "" {
		return nil, nil, &wsSubReject{code: aep.CodeDUnauthorized, msg: msg, details: det}
	}
	st := &streamState{tenant: c.tenant, mode: ModeAtLeastOnce}
	if st.state, err = c.h.e.State(ctx, c.tenant); err != nil {
		return nil, nil, &wsSubReject{msg: "the event log is not available", retryable: true}
	}
	req := durable.DurableRequest{
		Tenant: c.tenant, SubscriptionID: id, Group: durable.SubscriptionGroup(c.tenant, id), Filter: f,
		Policy: policyOf(c.h.cfg.AckPolicy, def), Queue: c.h.cfg.Queue, DeadLetter: encodeDeadLetter,
		OnWait:        func(d durable.DurableWait) { c.waitNotice(id, d) },
		MaxAckPending: def.MaxAckPending,
	}
	if def.ExpiresAt != nil {
		req.ExpiresAt = *def.ExpiresAt
	}
	dur, err := c.h.dc.OpenDurable(ctx, req)
	if err != nil {
		c.log.Warn().Err(err).Str("subscription_id", id).Msg("dialectd: websocket attach")
		return nil, nil, &wsSubReject{msg: "the subscription's stream could not be claimed: " + err.Error(), details: det, retryable: true}
	}
	st.frontier = st.fullFrontier(nil)
	s := &wsSub{id: id, dc: c.h.dc, dur: dur, st: st, requested: ModeAtLeastOnce, attached: true, done: make(chan struct{})}
	created := &wsSubCreated{SubscriptionID: id, Filter: def.Filter, CreatedAt: def.CreatedAt.Format(time.RFC3339Nano), DeliveryMode: ModeAtLeastOnce}
	return s, created, nil
}

// waitNotice tells the client that attaching to the durable subscription
// id waits for its previous holder: session.heartbeat {subscription_id,
// status "waiting", holder_node, holder_epoch, max_wait_ms}, at once and
// every durable.WaitNotice (docs/delivery-websocket-d.md).
func (c *wsConn) waitNotice(id string, d durable.DurableWait) {
	c.reply("session.heartbeat", "", wsWaiting{SubscriptionID: id, Status: "waiting", HolderNode: d.Node, HolderEpoch: d.Holder, MaxWaitMS: d.Left.Milliseconds()})
}

// wsWaiting is the payload of the waiting notice.
type wsWaiting struct {
	SubscriptionID string `json:"subscription_id"`
	Status         string `json:"status"`
	HolderNode     string `json:"holder_node,omitempty"`
	HolderEpoch    int64  `json:"holder_epoch"`
	MaxWaitMS      int64  `json:"max_wait_ms"`
}

// err is why the subscription ended.
func (s *wsSub) err() error {
	if s.dur != nil {
		return s.dur.Err()
	}
	return s.sub.Err()
}

// adHocIdentity is the identity of a new ad-hoc at_least_once
// subscription in the tenant's subscription journal and the suffix of its
// consumer group: "ws.<ULID>", unique to the connection and subscription.
// The wire id (sub_0001, ...) is per connection, so two connections of a
// tenant would otherwise claim the same journal key and fence each other;
// durable subscriptions are "sub_<ULID>" and never share this namespace.
func adHocIdentity() string { return "ws." + ulid.Make().String() }

// startAckSub starts an at_least_once subscription of the connection: a
// durable.DurableStream under an identity of its own (adHocIdentity) on a
// consumer group of its own ("aep.<tenant>.ws.<ULID>") whose start is
// committed first (the end offsets, or from_cursor's checked position).
// Acks and rejections arrive over the socket (settle).
func (c *wsConn) startAckSub(ctx context.Context, id string, f *filtering.Filter, st *streamState, from []cursor.PartitionOffset, seq uint64) (*wsSub, *wsSubCreated, *wsSubReject) {
	start := from
	if start == nil {
		start = st.fullFrontier(nil)
	}
	internal := adHocIdentity()
	group := "aep." + c.tenant.String() + "." + internal
	log := c.log.With().Str("subscription_id", id).Str("internal_id", internal).Logger()
	if err := c.h.dc.CommitStart(ctx, c.tenant, group, st.state, start); err != nil {
		log.Warn().Err(err).Msg("dialectd: websocket at_least_once start")
		return nil, nil, &wsSubReject{msg: "the subscription could not start", retryable: true}
	}
	dur, err := c.h.dc.OpenDurable(ctx, durable.DurableRequest{
		Tenant: c.tenant, SubscriptionID: internal, Group: group, Filter: f, Policy: c.h.cfg.AckPolicy,
		Queue: c.h.cfg.Queue, Sequence: seq, DeadLetter: encodeDeadLetter,
	})
	if err != nil {
		log.Warn().Err(err).Msg("dialectd: websocket at_least_once open")
		deleteGroup(c.h.dc, group) // its committed start: nothing else of it exists
		return nil, nil, &wsSubReject{msg: "the subscription could not start", retryable: true}
	}
	st.frontier = append([]cursor.PartitionOffset(nil), start...)
	s := &wsSub{id: id, dc: c.h.dc, dur: dur, group: group, st: st, requested: ModeAtLeastOnce, done: make(chan struct{})}
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
	transport.Pump(c.conn, s.dur.Deliveries(), func(d durable.DurableDelivery) bool {
		if s.cancelled.Load() {
			return false
		}
		if !s.dur.Hand(d) {
			return true // past the lease or fenced: taken back, the stream ends
		}
		var msgs [][]byte
		var err error
		switch {
		case d.Kind == durable.DurableDeadLettered:
			dl := deadLettered(*d.DeadLetter)
			dl.SubscriptionID = s.id // the wire id, not an ad-hoc one's internal identity
			var b []byte
			if b, err = c.envelope("event.dead_lettered", "", dl); err == nil {
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
			if d.Kind == durable.DurableEvent && i == len(msgs)-1 { // the event itself
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
		c.finish(s)
	})
}

func (c *wsConn) encodeAckEvent(s *wsSub, d durable.DurableDelivery) ([]byte, []byte, error) {
	return c.encodeEvent(s, d.Event, ModeAtLeastOnce, d.Sequence)
}

// settle queues event.acknowledged / event.rejected from the socket for
// every at_least_once subscription of the connection (the message names
// the event, not the subscription): the acker writes it to the journal of
// the attached durable subscriptions, then applies it to the streams. A
// valid ack is not answered (an unknown or duplicate one is harmless); one
// without an id, or over the limits of POST .../acks, is answered with
// event.rejected and not applied. Reader only.
func (c *wsConn) settle(attrs *aep.Attrs, payload json.RawMessage, reject bool) bool {
	if reject {
		c.nacks++
	} else {
		c.acks++
	}
	var p ackPayload
	rej, msg := durable.Rejection{}, "the payload must be an object with acknowledged_event_id"
	if err := json.Unmarshal(payload, &p); err == nil {
		rej, msg = checkAck(p, reject)
	}
	if msg != "" {
		c.flushAcks()
		return c.reply("event.rejected", attrs.ID, wsEventRejected{AcknowledgedEventID: attrs.ID, Error: wsErr(aep.CodeDInvalidEnvelope, msg, false)})
	}
	it := wsAck{msgID: attrs.ID, eventID: p.AcknowledgedEventID}
	if reject {
		it.rej = &rej
	}
	c.acker().push(it)
	return true
}
