package dialectd

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/internal/queue"
)

// Bounds of the acks of one connection (WSConfig.AckBatch is the count per
// journal record).
const (
	// DefaultWSAckQueue is the most acks a connection holds before they
	// are written (WSConfig.AckQueue): with the limits of checkAck, at
	// most ~2.4 MiB for a client that sends only the largest rejections,
	// ~100 KiB for plain acks.
	DefaultWSAckQueue = 1024
	// wsAckBatchBytes bounds the ids and rejections of one journal record
	// (a record stays well below Kafka's default 1 MiB).
	wsAckBatchBytes = 256 << 10
	// DefaultWSAckBatch is the most acks in one journal record.
	DefaultWSAckBatch = 1024
	// DefaultWSAckLinger is how long the first ack of a batch waits for
	// more (Kafka's producer linger.ms default since 4.0).
	DefaultWSAckLinger = 5 * time.Millisecond
)

// wsAck is one event.acknowledged / event.rejected read from the socket,
// or a barrier.
type wsAck struct {
	msgID   string             // the envelope's id: event.rejected answers it when the journal write failed
	eventID string             // acknowledged_event_id
	rej     *durable.Rejection // nil: an acknowledgement
	flushed chan struct{}
}

func (a *wsAck) size() int {
	n := len(a.eventID) + 16
	if a.rej != nil {
		n += len(a.rej.Code) + len(a.rej.Message) + 32
	}
	return n
}

// wsAcker writes the acks of one connection: the reader queues them
// (push), a pump of the connection (transport.Pump: a goroutine only while
// acks wait) takes what has queued up, up to AckBatch acks, writes them as
// one journal record per attached durable subscription (acks=all), then
// applies them to every at_least_once stream of the connection, and
// answers event.rejected for each when the journal write failed. The
// reader's flush waits until everything queued before it is done, so
// every answer the gateway sends after an ack comes after that ack is in
// Kafka (as when acks were written one by one on the reader). The
// connection's end (endSubs) ends the queue and waits for the pump, so no
// ack read is left behind when the subscriptions close.
type wsAcker struct {
	c       *wsConn
	q       *queue.Queue[wsAck]
	batch   []wsAck       // the pump's
	pending atomic.Int64  // acks queued and not written yet
	stopped chan struct{} // closed when the pump stopped
}

// acker is the connection's acker, started on the first ack. Reader only.
func (c *wsConn) acker() *wsAcker {
	if a := c.ackq.Load(); a != nil {
		return a
	}
	a := &wsAcker{c: c, q: queue.New[wsAck](c.h.cfg.AckQueue), stopped: make(chan struct{})}
	transport.Pump(c.conn, a.q, a.take, func(bool) { close(a.stopped) })
	c.ackq.Store(a)
	return a
}

// push queues an ack, waiting for room; false when the connection ended
// first (the ack is not applied: its event comes again).
func (a *wsAcker) push(it wsAck) bool {
	a.pending.Add(1)
	if a.q.Push(a.c.ctx, it) != nil {
		a.pending.Add(-1)
		return false
	}
	return true
}

// flush waits until every ack queued so far is written and applied (or
// the connection ended). Reader only.
func (c *wsConn) flushAcks() {
	a := c.ackq.Load()
	if a == nil || a.pending.Load() == 0 {
		return
	}
	done := make(chan struct{})
	if a.q.Push(c.ctx, wsAck{flushed: done}) != nil {
		return
	}
	select {
	case <-done:
	case <-a.stopped:
	case <-c.ctx.Done():
	}
}

// endAcks writes what is queued and stops the pump; the connection is
// ending (an ack read after this is not applied: its connection is gone).
func (c *wsConn) endAcks() {
	a := c.ackq.Load()
	if a == nil {
		return
	}
	a.q.End()
	<-a.stopped
}

// take is the pump's: first and what queues behind it within AckLinger,
// up to a batch, are written together; a barrier (a message that waits
// for an answer) ends the wait at once, and so does a connection without
// attached durable subscriptions (its acks are applied locally only: no
// write to save).
func (a *wsAcker) take(first wsAck) bool {
	cfg := &a.c.h.cfg
	lingers := cfg.AckLinger > 0 && a.c.hasAttached()
	b := append(a.batch[:0], first)
	size := first.size()
	var linger *time.Timer
	kinds := kindsOf(b) // id -> rejected, once b holds a rejection (nil before)
	for len(b) < cfg.AckBatch && size < wsAckBatchBytes && b[len(b)-1].flushed == nil {
		it, ok, ended := a.q.Next()
		if ok {
			if rejected, seen := kinds[it.eventID]; seen && it.flushed == nil && rejected != (it.rej != nil) {
				// acked and rejected in one batch: keep the client's
				// order (a record applies its acks before its rejections)
				a.write(b)
				b, size, kinds = append(b[:0], it), 0, nil
			} else {
				b = append(b, it)
			}
			size += it.size()
			switch {
			case kinds == nil && it.rej != nil: // b's first rejection
				kinds = kindsOf(b)
			case kinds != nil && it.flushed == nil:
				kinds[it.eventID] = it.rej != nil
			}
			continue
		}
		if ended || !lingers {
			break
		}
		if linger == nil {
			linger = time.NewTimer(cfg.AckLinger)
			defer linger.Stop()
		}
		select {
		case <-a.q.Ready():
			continue
		case <-linger.C:
		case <-a.c.ctx.Done(): // ending: write what there is
		}
		break
	}
	a.write(b)
	clear(b)
	a.batch = b[:0]
	return true
}

// kindsOf maps the event ids of the acks and rejections in b to whether
// they are rejections, or is nil when b holds no rejection (then no ack
// can contradict another).
func kindsOf(b []wsAck) map[string]bool {
	n := 0
	for i := range b {
		if b[i].rej != nil {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	m := make(map[string]bool, len(b)+1)
	for i := range b {
		if b[i].flushed == nil {
			m[b[i].eventID] = b[i].rej != nil
		}
	}
	return m
}

// write journals b for every attached durable subscription of the
// connection, applies it to every at_least_once stream, answers the acks
// whose journal write failed, and releases the barriers in b.
func (a *wsAcker) write(b []wsAck) {
	c := a.c
	var acks, rejectIDs []string
	var rejects []durable.Rejection
	for i := range b {
		switch it := &b[i]; {
		case it.flushed != nil:
		case it.rej == nil:
			acks = append(acks, it.eventID)
		default:
			rejectIDs = append(rejectIDs, it.eventID)
			rejects = append(rejects, *it.rej)
		}
	}
	n := len(acks) + len(rejectIDs)
	if n > 0 {
		durs, attached := c.ackTargets()
		failed := ""
		for _, id := range attached {
			// the connection may be ending: what it read still goes to Kafka
			ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), c.h.cfg.SetupTimeout)
			err := c.h.dc.JournalAcks(ctx, c.tenant, id, acks, rejects, rejectIDs)
			cancel()
			if err != nil {
				failed = id
				c.h.ackErrors.Add(float64(n))
				c.log.Warn().Err(err).Str("subscription_id", id).Int("acks", n).Msg("dialectd: websocket acks to the journal")
			}
		}
		for _, d := range durs {
			for _, id := range acks {
				d.Ack(id)
			}
			for i, id := range rejectIDs {
				d.Reject(id, rejects[i])
			}
		}
		if failed != "" {
			a.answerFailed(b, failed)
		}
		a.pending.Add(int64(-n))
	}
	for i := range b {
		if b[i].flushed != nil {
			close(b[i].flushed)
		}
	}
}

// answerFailed tells the client which acks of b could not be journaled
// for subscription sub: event.rejected answering each, retryable (sending
// the ack again is harmless).
func (a *wsAcker) answerFailed(b []wsAck, sub string) {
	for i := range b {
		it := &b[i]
		if it.flushed != nil {
			continue
		}
		e := wsErr(wsCodeInternal, "the acknowledgement could not be written to the subscription journal; send it again", true)
		e.Details = map[string]any{"event_id": it.eventID, "subscription_id": sub}
		if !a.c.reply("event.rejected", it.msgID, wsEventRejected{AcknowledgedEventID: it.msgID, Error: e}) {
			return // the connection is ending
		}
	}
}

// hasAttached says whether a durable subscription is attached to the
// connection.
func (c *wsConn) hasAttached() bool {
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	for _, s := range c.subs {
		if s.attached {
			return true
		}
	}
	return false
}

// ackTargets are the at_least_once streams of the connection and the ids
// of its attached durable subscriptions.
func (c *wsConn) ackTargets() (durs []*durable.DurableStream, attached []string) {
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	for _, s := range c.subs {
		if s.dur != nil {
			durs = append(durs, s.dur)
		}
		if s.attached {
			attached = append(attached, s.id)
		}
	}
	return durs, attached
}

// newAckErrors is the counter of acks whose journal write failed.
func newAckErrors(reg prometheus.Registerer) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "aep_websocket_ack_journal_errors_total",
		Help: "WebSocket acks and rejections of attached durable subscriptions whose journal write failed (each answered with event.rejected, retryable).",
	})
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}
