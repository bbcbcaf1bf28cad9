package dialectr

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/principal"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/internal/queue"
	"github.com/aep-gateway/aep-gateway/internal/tracing"
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
	if !transport.CanStream(w) {
		writeError(w, http.StatusInternalServerError, "internal", "response writer cannot stream")
		return
	}
	tn, stream, ok := rl.admit(w, r)
	if !ok {
		return
	}
	// the stream's end owes these, whether it ends here or parked
	var fin transport.Cleanup
	defer fin.Run()
	fin.Add(stream.Leave)

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
	var pl *plan
	var err error
	if sp.since > 0 {
		pl, err = rl.planSince(ctx, tn, sp.since, sp.noLive)
	} else {
		pl, err = rl.planResume(ctx, tn, sp.from, sp.all, sp.noLive)
	}
	if err != nil {
		rl.cfg.Logger.Error().Err(err).Stringer("tenant", tn).Msg("dialectr: plan resume")
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the event log is unavailable")
		return
	}
	if sp.noLive && pl.gate == nil {
		// live=0 with nothing to replay: the stream opens and ends.
		transport.StartSSE(w)
		end := queue.New[engine.Delivery](1)
		end.End()
		s := &sseStream{rl: rl}
		_ = transport.ServeSSE(w, r, s.sseConfig(), end, s.add, func(b []byte) []byte { return append(b, closingReplayed...) })
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
	fin.Add(sub.Close)

	transport.StartSSE(w)
	s := &sseStream{rl: rl, ceiling: sp.ceiling, gate: pl.gate, noLive: sp.noLive, tenant: tn.String(), reader: tn.Principal()}
	s.run(w, r, sub, stream, &fin)
}

// closingReplayed ends a live=0 stream.
const closingReplayed = ": closing: replay complete (live=0)\n\n"

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
	switch v := q.Get("live"); v {
	case "", "1", "true":
	case "0", "false":
		sp.noLive = true
	default:
		return sp, invalid("live must be 0 or 1 (false or true); got %q", trunc(v))
	}
	if q.Has("since") {
		if q.Has("from") {
			return sp, invalid("since cannot be combined with from")
		}
		d, err := engine.ParseSince(q.Get("since"))
		if err != nil {
			return sp, invalid("%v; got %q", err, trunc(q.Get("since")))
		}
		if r.Header.Get("Last-Event-ID") == "" {
			sp.since = d
			return sp, nil
		}
		// else an EventSource reconnecting to its URL: the position it
		// sends resumes exactly (below)
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

// sseStream is one SSE response, owned by its request's goroutine, or once
// parked by the goroutine that writes its current wake-up.
type sseStream struct {
	rl      *Relay
	ceiling aep.Capture
	gate    *replayGate // nil once caught up or when live
	noLive  bool        // live=0: end after the catch-up
	items   []gateItem  // scratch
	tenant  string
	reader  *principal.Principal // the stream is narrowed to what it may read
	spans   tracing.Deliveries
}

func (s *sseStream) sseConfig() transport.SSEConfig {
	return transport.SSEConfig{
		Heartbeat: s.rl.cfg.Ping, HeartbeatComment: "ping", WriteTimeout: s.rl.cfg.WriteTimeout,
		Shutdown: s.rl.hub.ShuttingDown(),
		OnShutdown: func(b []byte) []byte {
			return append(b, ": closing: the relay is shutting down; reconnect with Last-Event-ID\n\n"...)
		},
	}
}

func (s *sseStream) run(w http.ResponseWriter, r *http.Request, sub *engine.Subscription, stream *transport.Stream, fin *transport.Cleanup) {
	onClose := func(b []byte) []byte {
		// The engine closed (or the catch-up failed): tell the client to
		// come back; its Last-Event-ID resumes exactly.
		if err := sub.Err(); err != nil && !errors.Is(err, engine.ErrClosed) {
			s.rl.cfg.Logger.Warn().Err(err).Msg("dialectr: subscription ended")
		}
		return append(b, ": closing: reconnect with Last-Event-ID to resume\n\n"...)
	}
	cfg := s.sseConfig()
	cfg.Stream, cfg.Cleanup = stream, fin
	if tracing.On() {
		cfg.AfterWrite = s.spans.End
	}
	_ = transport.ServeSSE(w, r, cfg, sub.Deliveries(), s.add, onClose)
}

// add appends the SSE messages of one delivery: the event if it is
// delivered, the markers and held windows the gate lets out. The caught-up
// marker of a live=0 stream ends it (transport.ErrEnd).
func (s *sseStream) add(buf []byte, d engine.Delivery) ([]byte, error) {
	if d.CaughtUp() {
		if s.gate != nil {
			s.items = s.gate.flush(s.items[:0])
			buf = s.appendItems(buf)
			s.gate = nil
		}
		if s.noLive {
			return append(buf, closingReplayed...), transport.ErrEnd
		}
		return buf, nil
	}
	if s.gate == nil {
		return s.appendEvent(buf, d.Event), nil
	}
	s.items = s.gate.offer(d.Event, s.items[:0])
	return s.appendItems(buf), nil
}

func (s *sseStream) appendItems(buf []byte) []byte {
	for _, it := range s.items {
		if it.mark != nil {
			buf = appendExhaustedComment(buf, *it.mark)
		} else {
			buf = s.appendEvent(buf, it.ev)
		}
	}
	clear(s.items)
	return buf
}

func (s *sseStream) appendEvent(buf []byte, ev *engine.Event) []byte {
	if !readable(s.reader, ev) {
		return buf
	}
	raw, err := s.rl.eventBytes(ev, s.ceiling)
	if err != nil {
		s.rl.cfg.Logger.Warn().Err(err).Int32("partition", ev.Record.Partition).Int64("offset", ev.Record.Offset).Msg("dialectr: event not delivered: down-level failed")
		return buf
	}
	s.spans.Start(ev.Record, "sse-r", s.tenant, 0, 0)
	return appendSSEMessage(buf, &ev.Attrs, raw)
}

// appendSSEMessage appends event:, data: (the event on one line) and, for a
// session-scoped event, id: {session}:{epoch}:{seq}.
func appendSSEMessage(buf []byte, a *aep.Attrs, raw []byte) []byte {
	if a.Type != "" && !breaksLine(a.Type, false) {
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
	transport.WriteJSON(w, status, aep.RError{Error: code, Detail: detail})
}
