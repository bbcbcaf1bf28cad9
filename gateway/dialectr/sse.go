package dialectr

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// Stream is the SSE binding, GET {base}/stream (AEP-0003 §3.3). Mount it
// with gateway.Server.Mount(aep.DialectR, "/stream", r.Stream()).
func (rl *Relay) Stream() http.Handler { return http.HandlerFunc(rl.serveSSE) }

func (rl *Relay) serveSSE(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		writeError(w, http.StatusMethodNotAllowed, "method-not-allowed", "GET /stream with Accept: text/event-stream")
		return
	}
	if !acceptsEventStream(r.Header.Values("Accept")) {
		writeError(w, http.StatusNotAcceptable, "not-acceptable", "this endpoint serves text/event-stream only")
		return
	}
	if _, ok := w.(http.Flusher); !ok {
		writeError(w, http.StatusInternalServerError, "internal", "response writer cannot stream")
		return
	}
	tn, _ := tenant.FromContext(r.Context())
	if err := rl.enter(tn.String()); err != nil {
		refuseEntry(w, err)
		return
	}
	defer rl.leave(tn.String())

	sp, rerr := rl.sseParams(r)
	if rerr != nil {
		status := http.StatusBadRequest
		if rerr.Code == aep.CodeRLimitExceeded {
			status = http.StatusRequestEntityTooLarge
		}
		writeError(w, status, rerr.Code, rerr.Detail)
		return
	}
	ctx := r.Context()
	rl.startIndex(ctx, tn.String())
	pl, err := rl.planResume(ctx, tn, sp.from, sp.all)
	if err != nil {
		rl.cfg.Logger.Error().Err(err).Stringer("tenant", tn).Msg("dialectr: plan resume")
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the event log is unavailable")
		return
	}
	sub, err := rl.cfg.Engine.Subscribe(ctx, engine.Request{
		Tenant: tn, Filter: sp.filter, From: pl.from, Queue: rl.cfg.Queue, Lossless: true,
	})
	if err != nil {
		rl.cfg.Logger.Error().Err(err).Stringer("tenant", tn).Msg("dialectr: subscribe")
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the event log is unavailable")
		return
	}
	defer sub.Close()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sseStream{rl: rl, w: w, rc: http.NewResponseController(w), ceiling: sp.ceiling, gate: pl.gate}
	s.run(r, sub, pl.exhausted)
}

// sseParams reads filter, capture, from and Last-Event-ID (from wins).
func (rl *Relay) sseParams(r *http.Request) (subParams, *reqError) {
	q := r.URL.Query()
	var sp subParams
	var rerr *reqError
	if sp.filter, rerr = rl.parseFilter([]byte(q.Get("filter"))); rerr != nil {
		return sp, rerr
	}
	if sp.ceiling, rerr = parseCapture(q.Get("capture")); rerr != nil {
		return sp, rerr
	}
	if q.Has("from") {
		sp.from, sp.all, rerr = parseFrom([]byte(q.Get("from")), rl.cfg.MaxFrom)
		return sp, rerr
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		p, err := cursor.ParsePosition(id)
		if err != nil {
			return sp, invalid("Last-Event-ID must be {session}:{epoch}:{seq}: %v", err)
		}
		sp.from = []cursor.Position{p}
	}
	return sp, nil
}

// acceptsEventStream: no Accept header, or one naming text/event-stream or
// a wildcard that covers it.
func acceptsEventStream(vals []string) bool {
	if len(vals) == 0 {
		return true
	}
	for _, v := range vals {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			switch strings.ToLower(strings.TrimSpace(mt)) {
			case "text/event-stream", "text/*", "*/*":
				return true
			}
		}
	}
	return false
}

// sseStream is one SSE response, owned by its request's goroutine.
type sseStream struct {
	rl      *Relay
	w       http.ResponseWriter
	rc      *http.ResponseController
	ceiling aep.Capture
	gate    *replayGate // nil once caught up or when live
	buf     []byte
}

func (s *sseStream) write() bool {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.rl.cfg.WriteTimeout)) // unsupported: no deadline
	_, err := s.w.Write(s.buf)
	s.buf = s.buf[:0]
	return err == nil && s.rc.Flush() == nil
}

func (s *sseStream) run(r *http.Request, sub *engine.Subscription, marks []exhausted) {
	for _, m := range marks {
		s.buf = appendExhaustedComment(s.buf, m)
	}
	s.buf = append(s.buf, ": stream open\n\n"...)
	if !s.write() {
		return
	}
	ping := time.NewTicker(s.rl.cfg.Ping)
	defer ping.Stop()
	idle := true
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.rl.ctx.Done():
			s.buf = append(s.buf, ": closing: the relay is shutting down; reconnect with Last-Event-ID\n\n"...)
			s.write()
			return
		case <-ping.C:
			if idle {
				s.buf = append(s.buf, ": ping\n\n"...)
				if !s.write() {
					return
				}
			}
			idle = true
		case d, ok := <-sub.C():
			if !ok {
				// The engine closed (or the catch-up failed): tell the
				// client to come back; its Last-Event-ID resumes exactly.
				if err := sub.Err(); err != nil && !errors.Is(err, engine.ErrClosed) {
					s.rl.cfg.Logger.Warn().Err(err).Msg("dialectr: subscription ended")
				}
				s.buf = append(s.buf, ": closing: reconnect with Last-Event-ID to resume\n\n"...)
				s.write()
				return
			}
			s.add(d)
			for n := 1; n < 64 && len(sub.C()) > 0; n++ {
				if d, ok = <-sub.C(); !ok {
					break
				}
				s.add(d)
			}
			if len(s.buf) > 0 {
				if !s.write() {
					return
				}
				idle = false
			}
			if !ok {
				return
			}
		}
	}
}

// add appends the SSE message of one delivery, if it is delivered.
func (s *sseStream) add(d engine.Delivery) {
	if d.CaughtUp {
		s.gate = nil
		return
	}
	if s.gate != nil && !s.gate.admit(d.Event) {
		return
	}
	raw, err := s.rl.eventBytes(d.Event, s.ceiling)
	if err != nil {
		s.rl.cfg.Logger.Warn().Err(err).Int32("partition", d.Partition()).Int64("offset", d.Offset()).Msg("dialectr: event not delivered: down-level failed")
		return
	}
	s.buf = appendSSEMessage(s.buf, &d.Event.Attrs, raw)
}

// appendSSEMessage appends event:, data: (the event on one line) and, for a
// session-scoped event, id: {session}:{epoch}:{seq}.
func appendSSEMessage(buf []byte, a *aep.Attrs, raw []byte) []byte {
	if a.Type != "" && !strings.ContainsAny(a.Type, "\r\n") {
		buf = append(buf, "event: "...)
		buf = append(buf, a.Type...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "data: "...)
	buf = appendOneLine(buf, raw)
	buf = append(buf, '\n')
	if p, ok := positionOf(a); ok {
		buf = append(buf, "id: "...)
		buf = append(buf, p.Session...)
		buf = append(buf, ':')
		buf = strconv.AppendInt(buf, p.Epoch, 10)
		buf = append(buf, ':')
		buf = strconv.AppendInt(buf, p.Seq, 10)
		buf = append(buf, '\n')
	}
	return append(buf, '\n')
}

// appendOneLine appends raw with CR and LF replaced by spaces. In valid
// JSON they can only be whitespace between tokens (inside strings they are
// escaped), so the event is unchanged as JSON; a single-line event (every
// NDJSON-ingested one) is copied byte for byte.
func appendOneLine(buf, raw []byte) []byte {
	start := len(buf)
	buf = append(buf, raw...)
	if bytes.IndexByte(raw, '\n') < 0 && bytes.IndexByte(raw, '\r') < 0 {
		return buf // the common case: vectorised scans, a plain copy
	}
	for i := start; i < len(buf); i++ {
		if buf[i] == '\n' || buf[i] == '\r' {
			buf[i] = ' '
		}
	}
	return buf
}

// appendExhaustedComment appends ": replay-exhausted {session}
// {earliest-epoch}:{earliest-seq}" (AEP-0003 §3.3 rule 3). A session the log
// holds nothing of has no earliest position; the comment then ends after
// the session.
func appendExhaustedComment(buf []byte, m exhausted) []byte {
	buf = append(buf, ": replay-exhausted "...)
	buf = append(buf, strings.NewReplacer("\r", " ", "\n", " ").Replace(m.Session)...)
	if m.Earliest != nil {
		buf = append(buf, ' ')
		buf = strconv.AppendInt(buf, m.Earliest.Epoch, 10)
		buf = append(buf, ':')
		buf = strconv.AppendInt(buf, m.Earliest.Seq, 10)
	}
	return append(buf, "\n\n"...)
}

// writeError writes a dialect R error body (AEP-0003 §3.2.3 shape).
func writeError(w http.ResponseWriter, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Error  string `json:"error"`
		Detail string `json:"detail"`
	}{code, detail})
}
