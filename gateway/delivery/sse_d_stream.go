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
	rc := http.NewResponseController(w)
	log := h.cfg.Logger.With().Str("tenant", st.tenant).Logger()
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout)) // unsupported: no deadline
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write([]byte(": stream open\n\n")) {
		return
	}
	hb := time.NewTicker(h.cfg.Heartbeat)
	defer hb.Stop()
	var buf []byte
	idle := true
	for {
		select {
		case <-r.Context().Done():
			return
		case <-hb.C:
			if idle && !write([]byte(": heartbeat\n\n")) {
				return
			}
			idle = true
		case d, ok := <-sub.C():
			if !ok {
				return
			}
			buf = buf[:0]
			var err error
			for n := 0; ; n++ {
				if buf, err = h.appendMessage(buf, st, d); err != nil {
					log.Error().Err(err).Msg("delivery: encode message")
					return
				}
				if n+1 >= h.cfg.Batch || len(sub.C()) == 0 {
					break
				}
				if d, ok = <-sub.C(); !ok {
					break
				}
			}
			if !write(buf) {
				return
			}
			idle = false
			if !ok {
				return
			}
		}
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
