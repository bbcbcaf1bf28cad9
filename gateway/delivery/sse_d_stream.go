package delivery

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/aep-gateway/aep-gateway/cursor"
)

// stream writes the subscription's deliveries as SSE messages until the
// client leaves, a write fails, or the subscription ends.
func (h *sseHandlerD) stream(w http.ResponseWriter, r *http.Request, sub *Subscription, st *streamD) {
	cfg := sseLoopConfig{Heartbeat: h.cfg.Heartbeat, WriteTimeout: h.cfg.WriteTimeout, Batch: h.cfg.Batch}
	appendMsg := func(buf []byte, d Delivery) ([]byte, error) { return h.appendMessage(buf, st, d) }
	if err := serveSSE(w, r, cfg, sub.C(), appendMsg, nil); err != nil {
		h.cfg.Logger.Error().Err(err).Str("tenant", st.tenant).Msg("delivery: encode message")
	}
}

// appendMessage appends the SSE message of one delivery to buf.
func (h *sseHandlerD) appendMessage(buf []byte, st *streamD, d Delivery) ([]byte, error) {
	if d.CaughtUp && d.Fallback {
		st.advance(d.Frontier)
		return buf, nil // the stream went on without loss: nothing to tell
	}
	if d.CaughtUp {
		return h.appendReplayed(buf, st, d)
	}
	p := d.Partition()
	if int(p) < len(st.frontier) {
		st.frontier[p].Offset = d.Offset() + 1
	}
	cur, err := h.cursorAt(st, d.Sequence)
	if err != nil {
		return buf, err
	}
	buf = append(buf, "id: "...)
	buf = append(buf, cur...)
	buf = append(buf, "\nevent: "...)
	buf = append(buf, d.Event.Attrs.Type...)
	buf = append(buf, "\ndata: "...)
	var ok bool
	if buf, ok = appendDataD(buf, d.Event.Record.Value, st.mode, d.Sequence, cur); !ok {
		return buf, errors.New("stored event is not a JSON object at offset " + strconv.FormatInt(d.Offset(), 10))
	}
	return append(buf, "\n\n"...), nil
}

// advance moves the stream's frontier to a handover position where it is
// ahead.
func (st *streamD) advance(frontier []cursor.PartitionOffset) {
	for _, po := range frontier {
		if int(po.Partition) < len(st.frontier) && po.Offset > st.frontier[po.Partition].Offset {
			st.frontier[po.Partition].Offset = po.Offset
		}
	}
}

// appendReplayed appends event.replayed after a catch-up.
func (h *sseHandlerD) appendReplayed(buf []byte, st *streamD, d Delivery) ([]byte, error) {
	st.advance(d.Frontier)
	cur, err := h.cursorAt(st, d.Sequence)
	if err != nil {
		return buf, err
	}
	p := replayedD{FromCursor: st.from, ToCursor: cur, EventsReplayed: d.Replayed}
	for _, g := range st.gaps {
		p.Gaps = append(p.Gaps, gapD{Partition: g.Partition, Requested: g.Requested, RestartAt: g.RestartAt, Reason: g.Reason.String()})
	}
	ev, err := replayedEvent(p, time.Now())
	if err != nil {
		return buf, err
	}
	buf = append(buf, "id: "...)
	buf = append(buf, cur...)
	buf = append(buf, "\nevent: event.replayed\ndata: "...)
	buf = append(buf, ev...)
	return append(buf, "\n\n"...), nil
}
