package delivery

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/filtering"
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
	Batch  int
	Logger zerolog.Logger
}

type sseHandlerD struct {
	e      *Engine
	kr     *cursor.Keyring
	tenant func(*http.Request) string
	cfg    SSEConfig
}

// NewSSEHandlerD returns the dialect D event stream, GET /aep/events
// (transport-sse.md): the filter comes from the query (filtering.ParseDQuery),
// delivery_mode is best_effort (default) or replayable, and from_cursor or
// Last-Event-ID (which wins: it is the browser's reconnect) resumes from a
// cursor signed by kr. tenant names the authenticated tenant of a request.
func NewSSEHandlerD(e *Engine, kr *cursor.Keyring, tenant func(*http.Request) string, cfg SSEConfig) http.Handler {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 64
	}
	return &sseHandlerD{e: e, kr: kr, tenant: tenant, cfg: cfg}
}

// dErrorBody is dialect D's error object (error-model.md) as a response body.
type dErrorBody struct {
	Error struct {
		Code      string            `json:"code"`
		Message   string            `json:"message"`
		Retryable bool              `json:"retryable"`
		Details   map[string]string `json:"details,omitempty"`
	} `json:"error"`
}

func writeErrD(w http.ResponseWriter, status int, code, msg string, retryable bool, details map[string]string) {
	var b dErrorBody
	b.Error.Code, b.Error.Message, b.Error.Retryable, b.Error.Details = code, msg, retryable, details
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(b)
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
	writeErrD(w, http.StatusBadRequest, aep.CodeDSubscriptionRejected, msg, false, details)
}

// streamD is the state of one open stream.
type streamD struct {
	tenant   string
	mode     string
	state    cursor.TopicState
	frontier []cursor.PartitionOffset // one per partition, sorted
	from     string                   // the cursor resumed from, "" when live
	gaps     []cursor.Gap
}

func (h *sseHandlerD) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, ok := w.(http.Flusher); !ok {
		writeErrD(w, http.StatusInternalServerError, aep.CodeDInternalError, "streaming is not supported on this connection", false, nil)
		return
	}
	f, err := filtering.ParseDQuery(r.URL.Query())
	if err != nil {
		msg, det := rejectionOf(err)
		reject(w, msg, det)
		return
	}
	st := &streamD{tenant: h.tenant(r), mode: f.DeliveryMode(), from: f.FromCursor()}
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
		h.cfg.Logger.Warn().Err(err).Str("tenant", st.tenant).Msg("delivery: topic state")
		writeErrD(w, http.StatusServiceUnavailable, aep.CodeDInternalError, "the event log is not available", true, nil)
		return
	}
	req := Request{Tenant: st.tenant, Filter: f, Queue: h.cfg.Queue, Lossless: st.mode == ModeReplayable}
	if st.from != "" {
		c, err := h.kr.Decode(st.tenant, st.from)
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
	sub, err := h.e.Subscribe(ctx, req)
	if err != nil {
		h.cfg.Logger.Warn().Err(err).Str("tenant", st.tenant).Msg("delivery: subscribe")
		writeErrD(w, http.StatusServiceUnavailable, aep.CodeDInternalError, "the subscription could not start", true, nil)
		return
	}
	defer sub.Close()
	if req.From == nil {
		st.frontier = st.fullFrontier(sub.Start())
	} else {
		st.frontier = req.From
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	h.stream(w, r, sub, st)
}

// fullFrontier returns one entry per partition of the topic, sorted: the
// offsets of given, and the high watermark for partitions it does not name.
func (st *streamD) fullFrontier(given []cursor.PartitionOffset) []cursor.PartitionOffset {
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
func (h *sseHandlerD) cursorAt(st *streamD, seq uint64) (string, error) {
	return h.kr.Encode(st.tenant, cursor.Cursor{
		Topic: st.state.ID.Tag(), Partitions: st.state.Partitions, Sequence: seq, Offsets: st.frontier,
	})
}

// replayedD is the payload of event.replayed (seed 001), with the gaps the
// replay met, where any.
type replayedD struct {
	FromCursor     string `json:"from_cursor"`
	ToCursor       string `json:"to_cursor"`
	EventsReplayed uint64 `json:"events_replayed"`
	Gaps           []gapD `json:"gaps,omitempty"`
}

type gapD struct {
	Partition int32  `json:"partition"`
	Requested int64  `json:"requested"`
	RestartAt int64  `json:"restart_at"`
	Reason    string `json:"reason"`
}

// replayedEvent builds the event.replayed envelope.
func replayedEvent(p replayedD, now time.Time) ([]byte, error) {
	return json.Marshal(struct {
		Version   string    `json:"aep_version"`
		ID        string    `json:"id"`
		Type      string    `json:"type"`
		Source    string    `json:"source"`
		CreatedAt string    `json:"created_at"`
		Payload   replayedD `json:"payload"`
	}{"0.1", "evt_" + ulid.Make().String(), "event.replayed", "aep-gateway", now.UTC().Format(time.RFC3339Nano), p})
}
