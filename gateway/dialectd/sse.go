package dialectd

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/internal/tracing"
)

// Dialect D delivery modes (seed 001).
const (
	ModeBestEffort  = "best_effort"
	ModeAtLeastOnce = "at_least_once"
	ModeReplayable  = "replayable"
)

// SSEConfig configures the dialect D SSE handler. Zero fields mean the
// documented defaults.
type SSEConfig struct {
	// Heartbeat is the idle time after which a ": heartbeat" comment is
	// sent. Zero means 15s.
	Heartbeat time.Duration
	// WriteTimeout bounds each write to the client. Zero means 10s.
	WriteTimeout time.Duration
	// Queue is each stream's queue length. Zero means the Engine's.
	Queue int
	// Batch is how many queued events one write carries at most before a
	// flush. Zero means 64.
	Batch int
	// Hub admits each stream with every other stream of the node
	// (per-tenant cap) and ends it on shutdown. Nil means a Hub of the
	// handler's own, without a cap.
	Hub    *transport.Hub
	Logger zerolog.Logger
}

type sseHandler struct {
	e   *engine.Engine
	kr  *cursor.Keyring
	cfg SSEConfig
	hub *transport.Hub
}

// NewSSEHandler returns the dialect D event stream, GET /aep/events
// (transport-sse.md): the filter comes from the query (filtering.ParseDQuery),
// delivery_mode is best_effort (default) or replayable, and from_cursor or
// Last-Event-ID (which wins: it is the browser's reconnect) resumes from a
// cursor signed by kr. tenant names the authenticated tenant of a request.
func NewSSEHandler(e *engine.Engine, kr *cursor.Keyring, cfg SSEConfig) http.Handler {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 64
	}
	return &sseHandler{e: e, kr: kr, cfg: cfg, hub: hubOf(cfg.Hub)}
}

// anyDetails is an error's string details as DError holds them (nil
// stays nil: no details member).
func anyDetails(d map[string]string) map[string]any {
	if d == nil {
		return nil
	}
	out := make(map[string]any, len(d))
	for k, v := range d {
		out[k] = v
	}
	return out
}

func writeErr(w http.ResponseWriter, status int, code, msg string, retryable bool, details map[string]string) {
	transport.WriteJSON(w, status, aep.DErrorBody{Error: aep.DError{Code: code, Message: msg, Retryable: retryable, Details: anyDetails(details)}})
}

// rejectionOf is the subscription_rejected message and details of a filter
// that did not parse: a filtering.Error's message and field, or err's text.
func rejectionOf(err error) (string, map[string]string) {
	var fe *filtering.Error
	if !errors.As(err, &fe) {
		return err.Error(), nil
	}
	if fe.Field == "" {
		return fe.Message, nil
	}
	return fe.Message, map[string]string{"field": fe.Field}
}

func reject(w http.ResponseWriter, msg string, details map[string]string) {
	writeErr(w, http.StatusBadRequest, aep.CodeDSubscriptionRejected, msg, false, details)
}

// streamState is the state of one open stream.
type streamState struct {
	tenant   tenant.Tenant
	mode     string
	state    cursor.TopicState
	frontier []cursor.PartitionOffset // one per partition, sorted
	from     string                   // the cursor resumed from, "" when live
	gaps     []cursor.Gap
	enc      *cursor.Encoder // signs this stream's cursors; made by the first cursor encoded
	curBuf   []byte          // scratch of cursorBytesAfter
	seq      uint64          // the sequence of the last cursor made: a shutdown's notice resumes from it
	spans    tracing.Deliveries
}

func (h *sseHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !transport.CanStream(w) {
		writeErr(w, http.StatusInternalServerError, aep.CodeDInternalError, "streaming is not supported on this connection", false, nil)
		return
	}
	f, err := filtering.ParseDQuery(r.URL.Query())
	if err != nil {
		msg, det := rejectionOf(err)
		reject(w, msg, det)
		return
	}
	st := &streamState{tenant: requestTenant(r), mode: f.DeliveryMode(), from: f.FromCursor()}
	if refuseScope(w, st.tenant, f) {
		return
	}
	stream, ok := admit(w, h.hub, st.tenant)
	if !ok {
		return
	}
	// the stream's end owes these, whether it ends here or parked
	var fin transport.Cleanup
	defer fin.Run()
	fin.Add(stream.Leave)
	since, ok := sinceParam(w, r, st)
	if !ok {
		return
	}
	switch st.mode {
	case "":
		st.mode = ModeBestEffort
		if st.from != "" {
			st.mode = ModeReplayable
		}
	case ModeAtLeastOnce:
		reject(w, "delivery_mode at_least_once needs acknowledgements: create a durable subscription (POST /aep/subscriptions) and stream it", map[string]string{"field": "delivery_mode"})
		return
	case ModeBestEffort:
		if st.from != "" {
			reject(w, "from_cursor requires delivery_mode replayable", map[string]string{"field": "from_cursor"})
			return
		}
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		st.from = id
	}
	ctx := r.Context()
	if st.state, err = h.e.State(ctx, st.tenant); err != nil {
		h.cfg.Logger.Warn().Err(err).Stringer("tenant", st.tenant).Msg("dialectd: topic state")
		writeErr(w, http.StatusServiceUnavailable, aep.CodeDInternalError, "the event log is not available", true, nil)
		return
	}
	req := engine.Request{Tenant: st.tenant, Filter: f, Queue: h.cfg.Queue, Lossless: st.mode == ModeReplayable}
	if st.from != "" {
		c, err := h.kr.Decode(st.tenant.String(), st.from)
		if err != nil {
			det := map[string]string{"field": "from_cursor"}
			var ce *cursor.Error
			if errors.As(err, &ce) {
				det["cursor_error"] = string(ce.Code)
			}
			reject(w, "the cursor cannot be used: "+err.Error(), det)
			return
		}
		var start []cursor.PartitionOffset
		start, st.gaps = st.state.Check(c)
		req.From, req.Sequence = st.fullFrontier(start), c.Sequence
	}
	if since > 0 {
		if req.From, err = h.e.OffsetsAfter(ctx, st.tenant, time.Now().Add(-since)); err != nil {
			h.cfg.Logger.Warn().Err(err).Stringer("tenant", st.tenant).Msg("dialectd: since")
			writeErr(w, http.StatusServiceUnavailable, aep.CodeDInternalError, "the event log is not available", true, nil)
			return
		}
	}
	sub, err := h.e.Subscribe(ctx, req)
	if err != nil {
		h.cfg.Logger.Warn().Err(err).Stringer("tenant", st.tenant).Msg("dialectd: subscribe")
		writeErr(w, http.StatusServiceUnavailable, aep.CodeDInternalError, "the subscription could not start", true, nil)
		return
	}
	fin.Add(sub.Close)
	if req.From == nil {
		st.frontier = st.fullFrontier(sub.Start())
	} else {
		st.frontier = req.From
	}
	transport.StartSSE(w)
	h.stream(w, r, sub, st, stream, &fin)
}

// fullFrontier returns one entry per partition of the topic, sorted: the
// offsets of given, and the high watermark for partitions it does not name.
func (st *streamState) fullFrontier(given []cursor.PartitionOffset) []cursor.PartitionOffset {
	out := make([]cursor.PartitionOffset, st.state.Partitions)
	for p := range out {
		out[p] = cursor.PartitionOffset{Partition: int32(p), Offset: st.state.End[p]}
	}
	for _, po := range given {
		if po.Partition >= 0 && int(po.Partition) < len(out) {
			out[po.Partition].Offset = po.Offset
		}
	}
	return out
}

// cursorAt encodes the stream's position after the delivery with seq.
// The stream's Encoder reuses its HMAC state and buffers: the string is the
// one allocation.
func (st *streamState) cursorAt(kr *cursor.Keyring, seq uint64) (string, error) {
	st.seq = max(st.seq, seq)
	return st.encoder(kr).Encode(st.cursor(seq))
}

// cursorBytesAfter moves the stream's frontier past ev (a redelivery below
// the frontier leaves it) and signs the cursor of its delivery with seq
// into the stream's scratch buffer: no allocation. The bytes are valid
// until the stream's next cursor.
func (st *streamState) cursorBytesAfter(kr *cursor.Keyring, ev *engine.Event, seq uint64) ([]byte, error) {
	st.passed(ev)
	st.seq = max(st.seq, seq)
	var err error
	st.curBuf, err = st.encoder(kr).Append(st.curBuf[:0], st.cursor(seq))
	return st.curBuf, err
}

func (st *streamState) encoder(kr *cursor.Keyring) *cursor.Encoder {
	if st.enc == nil {
		st.enc = kr.NewEncoder(st.tenant.String())
	}
	return st.enc
}

func (st *streamState) cursor(seq uint64) *cursor.Cursor {
	return &cursor.Cursor{Topic: st.state.ID.Tag(), Partitions: st.state.Partitions, Sequence: seq, Offsets: st.frontier}
}

// passed moves the stream's frontier past ev, where it is behind.
func (st *streamState) passed(ev *engine.Event) {
	r := ev.Record
	if int(r.Partition) < len(st.frontier) && r.Offset+1 > st.frontier[r.Partition].Offset {
		st.frontier[r.Partition].Offset = r.Offset + 1
	}
}

// appendEvent appends the data of ev as delivered in mode with seq and
// cur: its stored bytes with this gateway's delivery member.
func appendEvent[C string | []byte](buf []byte, ev *engine.Event, mode string, seq uint64, cur C) ([]byte, error) {
	out, ok := appendData(buf, ev.Record.Value, mode, seq, cur)
	if !ok {
		return buf, fmt.Errorf("stored event is not a JSON object at partition %d offset %d", ev.Record.Partition, ev.Record.Offset)
	}
	return out, nil
}

// appendEventSSE appends the SSE message of ev: id (the cursor), event
// (its type) and data (appendEvent).
func appendEventSSE(buf []byte, ev *engine.Event, mode string, seq uint64, cur []byte) ([]byte, error) {
	buf = append(buf, "id: "...)
	buf = append(buf, cur...)
	buf = append(buf, "\nevent: "...)
	buf = append(buf, ev.Attrs.Type...)
	buf = append(buf, "\ndata: "...)
	buf, err := appendEvent(buf, ev, mode, seq, cur)
	if err != nil {
		return buf, err
	}
	return append(buf, "\n\n"...), nil
}

// requestTenant is the authenticated tenant of r; the zero Tenant when the
// handler is not mounted behind authentication.
func requestTenant(r *http.Request) tenant.Tenant {
	t, _ := tenant.FromContext(r.Context())
	return t
}

// hubOf is h, or a Hub of one's own without a cap.
func hubOf(h *transport.Hub) *transport.Hub {
	if h == nil {
		return transport.NewHub(0)
	}
	return h
}

// admit admits a stream of tn through hub, or answers the refusal; the
// caller Leaves the stream when it ends.
func admit(w http.ResponseWriter, hub *transport.Hub, tn tenant.Tenant) (*transport.Stream, bool) {
	stream, err := hub.Enter(tn.String(), nil)
	if err != nil {
		refuseStream(w, err)
		return nil, false
	}
	return stream, true
}

// refuseStream answers a stream the Hub did not admit: 429 over the
// tenant's cap (D has no limit code: protocol_error naming the limit, as
// ingest does), 503 while shutting down.
func refuseStream(w http.ResponseWriter, err error) {
	if errors.Is(err, transport.ErrTenantLimit) {
		writeErr(w, http.StatusTooManyRequests, aep.CodeDProtocolError,
			"this tenant holds the most streams and connections allowed on this node; close one first", true,
			map[string]string{"limit": "max_streams_per_tenant"})
		return
	}
	writeErr(w, http.StatusServiceUnavailable, aep.CodeDInternalError, "the gateway is shutting down", true, nil)
}
