package dialectd

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/internal/tracing"
)

// Hand-over confirmations: a durable delivery counts toward max_attempts
// only once the transport wrote it to the client's connection and flushed
// it without error (durable.DurableStream.Handed). SSE confirms per write
// (transport.SSEConfig.AfterWrite), WebSocket per message
// (transport.WSConfig.Written, with the delivery as the Item's Meta).

// handedBatch collects the durable events encoded into the SSE write being
// prepared and confirms them when that write succeeded. Bounded by the
// write's batch.
type handedBatch struct {
	s  *durable.DurableStream
	mu sync.Mutex
	ds []durable.DurableDelivery
}

func (b *handedBatch) add(d durable.DurableDelivery) {
	b.mu.Lock()
	b.ds = append(b.ds, d)
	b.mu.Unlock()
}

// written is the SSE writer's AfterWrite: ok confirms what was added since
// the last write; a failed write (or the stream's end) forgets it.
func (b *handedBatch) written(ok bool) {
	b.mu.Lock()
	ds := b.ds
	b.ds = b.ds[:0]
	if ok && len(ds) > 0 {
		b.s.Handed(ds...)
	}
	clear(ds)
	b.mu.Unlock()
}

// handedMeta is the Meta of a WebSocket message that carries a durable
// event: the writer confirms it to its stream once written.
type handedMeta struct {
	s    *durable.DurableStream
	d    durable.DurableDelivery
	span any // the delivery's tracing span, or nil
}

// writtenMeta is the WebSocket writer's Written hook: it confirms durable
// hand-overs and ends delivery spans.
func writtenMeta(meta any) {
	if h, ok := meta.(*handedMeta); ok {
		h.s.Handed(h.d)
		meta = h.span
	}
	tracing.EndWritten(meta)
}

// pushHanded queues the message m of durable delivery d of s; the writer
// confirms it to s once written.
func (c *wsConn) pushHanded(m []byte, s *durable.DurableStream, d durable.DurableDelivery) bool {
	meta := &handedMeta{s: s, d: d}
	if tracing.On() {
		meta.span = tracing.StartDelivery(d.Event.Record, "ws-durable", c.tenant.String(), d.Sequence, d.Attempt)
	}
	return c.conn.SendCtx(c.ctx, transport.Item{Msg: m, Meta: meta})
}

// streamCap is the max_ack_pending of a stream request: the
// subscription's, or lower with the query parameter max_ack_pending (an
// integer 1..MaxMaxAckPending; a value above the subscription's keeps the
// subscription's: a stream may only lower it). A refusal is answered.
func streamCap(w http.ResponseWriter, r *http.Request, def durable.SubscriptionDef) (int, bool) {
	n := maxAckPendingOf(def)
	v := r.URL.Query().Get("max_ack_pending")
	if v == "" {
		return n, true
	}
	m, err := strconv.Atoi(v)
	if err != nil || m < 1 || m > MaxMaxAckPending {
		reject(w, "max_ack_pending must be an integer from 1 to "+strconv.Itoa(MaxMaxAckPending), map[string]string{"field": "max_ack_pending"})
		return 0, false
	}
	return min(m, n), true
}
