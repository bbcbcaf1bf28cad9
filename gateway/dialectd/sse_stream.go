package dialectd

import (
	"net/http"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/internal/tracing"
)

// stream writes the subscription's deliveries as SSE messages until the
// client leaves, a write fails, or the subscription ends; parked where the
// connection allows (transport.ServeSSE), fin then runs when it ends.
func (h *sseHandler) stream(w http.ResponseWriter, r *http.Request, sub *engine.Subscription, st *streamState,
	stream *transport.Stream, fin *transport.Cleanup) {
	cfg := transport.SSEConfig{
		Heartbeat: h.cfg.Heartbeat, WriteTimeout: h.cfg.WriteTimeout, Batch: h.cfg.Batch, Shutdown: h.hub.ShuttingDown(),
		Stream: stream, Cleanup: fin,
		OnError: func(err error) {
			h.cfg.Logger.Error().Err(err).Stringer("tenant", st.tenant).Msg("dialectd: encode message")
		},
		OnShutdown: func(buf []byte) []byte {
			return appendShutdownNotice(buf, h.kr, st, "", "the gateway is shutting down; reconnect (to any node) with Last-Event-ID, or from_cursor set to cursor")
		},
	}
	if tracing.On() {
		cfg.AfterWrite = st.spans.End
	}
	appendMsg := func(buf []byte, d engine.Delivery) ([]byte, error) { return h.appendMessage(buf, st, d) }
	_ = transport.ServeSSE(w, r, cfg, sub.Deliveries(), appendMsg, nil) // errors go to OnError
}

// appendShutdownNotice appends the last words of a D SSE stream that the
// gateway's shutdown ends: subscription.expired with reason shutdown, the
// cursor of the stream's position and msg saying how to resume (dialect R
// streams end with their closing comment likewise). Written by the
// stream's writer, like its deliveries.
func appendShutdownNotice(buf []byte, kr *cursor.Keyring, st *streamState, subID, msg string) []byte {
	cur, err := st.cursorAt(kr, st.seq)
	if err != nil {
		cur = "" // a notice without a cursor still says why the stream ends
	}
	e := aep.DError{Code: aep.CodeDSubscriptionError, Message: msg, Retryable: true}
	ev, err := aep.DNotice("subscription.expired", aep.DSubscriptionEnded{SubscriptionID: subID, Reason: "shutdown", Cursor: cur, Error: &e}, time.Now())
	if err != nil {
		return buf
	}
	return appendNotice(buf, "subscription.expired", ev)
}

// appendMessage appends the SSE message of one delivery to buf.
func (h *sseHandler) appendMessage(buf []byte, st *streamState, d engine.Delivery) ([]byte, error) {
	if d.CaughtUp() && d.Fallback {
		st.advance(d.Frontier)
		return buf, nil // the stream went on without loss: nothing to tell
	}
	if d.CaughtUp() {
		return h.appendReplayed(buf, st, d)
	}
	cur, err := st.cursorBytesAfter(h.kr, d.Event, d.Sequence)
	if err != nil {
		return buf, err
	}
	st.spans.Start(d.Event.Record, "sse", st.tenant.String(), d.Sequence, 0)
	return appendEventSSE(buf, d.Event, st.mode, d.Sequence, cur)
}

// advance moves the stream's frontier to a handover position where it is
// ahead.
func (st *streamState) advance(frontier []cursor.PartitionOffset) {
	for _, po := range frontier {
		if int(po.Partition) < len(st.frontier) && po.Offset > st.frontier[po.Partition].Offset {
			st.frontier[po.Partition].Offset = po.Offset
		}
	}
}

// appendReplayed appends event.replayed after a catch-up.
func (h *sseHandler) appendReplayed(buf []byte, st *streamState, d engine.Delivery) ([]byte, error) {
	st.advance(d.Frontier)
	cur, err := st.cursorAt(h.kr, d.Sequence)
	if err != nil {
		return buf, err
	}
	p := aep.DReplayed{FromCursor: st.from, ToCursor: cur, EventsReplayed: d.Replayed}
	for _, g := range st.gaps {
		p.Gaps = append(p.Gaps, aep.DGap{Partition: g.Partition, Requested: g.Requested, RestartAt: g.RestartAt, Reason: g.Reason.String()})
	}
	ev, err := aep.DNotice("event.replayed", p, time.Now())
	if err != nil {
		return buf, err
	}
	buf = append(buf, "id: "...)
	buf = append(buf, cur...)
	buf = append(buf, "\nevent: event.replayed\ndata: "...)
	buf = append(buf, ev...)
	return append(buf, "\n\n"...), nil
}
