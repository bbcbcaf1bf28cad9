package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/filtering"
)

// SubsConfigD configures the durable subscriptions API. Zero fields mean
// the documented defaults.
type SubsConfigD struct {
	// Heartbeat, WriteTimeout and Batch are the SSE stream's, as in
	// SSEConfig (15s, 10s, 64).
	Heartbeat    time.Duration
	WriteTimeout time.Duration
	Batch        int
	// Window bounds pending deliveries per partition of a stream (1024).
	Window int
	// Policy is the default redelivery policy (D reliability.md defaults);
	// a subscription may set its own ack_timeout_ms and max_attempts.
	Policy AckPolicy
	// CommitInterval of the streams (1s).
	CommitInterval time.Duration
	// MaxBodyBytes bounds request bodies (1 MiB).
	MaxBodyBytes int64
	// SetupTimeout bounds the Kafka work of one request (10s).
	SetupTimeout time.Duration
	Logger       zerolog.Logger
}

// Bounds of per-subscription policy fields a client may set.
const (
	minAckTimeout   = 100 * time.Millisecond
	maxAckTimeout   = time.Hour
	maxMaxAttempts  = 100
	maxAcksPerBatch = 10000
)

// SubscriptionsHandlerD serves dialect D's durable subscriptions:
//
//	POST   /aep/subscriptions              create (201, subscription.created payload)
//	GET    /aep/subscriptions              list
//	GET    /aep/subscriptions/{id}         state: filter, mode, committed position, lag, pending acks, redeliveries
//	DELETE /aep/subscriptions/{id}         delete (204)
//	GET    /aep/subscriptions/{id}/stream  SSE stream (at_least_once)
//	POST   /aep/subscriptions/{id}/acks    a batch of event.acknowledged / event.rejected
//
// One stream per subscription is open on a node at a time; a second is
// refused with 409. Acks reach the stream open on this node.
type SubscriptionsHandlerD struct {
	e      *Engine
	kr     *cursor.Keyring
	tenant func(*http.Request) string
	cfg    SubsConfigD

	mu     sync.Mutex
	active map[string]*DurableStream // by tenant + "/" + id; guarded by mu
}

// NewSubscriptionsHandlerD returns the handler; mount it at
// /aep/subscriptions and /aep/subscriptions/*.
func NewSubscriptionsHandlerD(e *Engine, kr *cursor.Keyring, tenant func(*http.Request) string, cfg SubsConfigD) *SubscriptionsHandlerD {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 64
	}
	if cfg.Window <= 0 {
		cfg.Window = 1024
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.SetupTimeout <= 0 {
		cfg.SetupTimeout = 10 * time.Second
	}
	cfg.Policy = cfg.Policy.WithDefaults()
	return &SubscriptionsHandlerD{e: e, kr: kr, tenant: tenant, cfg: cfg, active: map[string]*DurableStream{}}
}

func (h *SubscriptionsHandlerD) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/aep/subscriptions")
	if !ok {
		writeErrD(w, http.StatusNotFound, aep.CodeDProtocolError, "not found", false, nil)
		return
	}
	rest = strings.Trim(rest, "/")
	parts := strings.Split(rest, "/")
	switch {
	case rest == "" && r.Method == http.MethodPost:
		h.create(w, r)
	case rest == "" && r.Method == http.MethodGet:
		h.list(w, r)
	case len(parts) == 1 && r.Method == http.MethodGet:
		h.get(w, r, parts[0])
	case len(parts) == 1 && r.Method == http.MethodDelete:
		h.delete(w, r, parts[0])
	case len(parts) == 2 && parts[1] == "stream" && r.Method == http.MethodGet:
		h.stream(w, r, parts[0])
	case len(parts) == 2 && parts[1] == "acks" && r.Method == http.MethodPost:
		h.acks(w, r, parts[0])
	case rest == "" || len(parts) == 1 || (len(parts) == 2 && (parts[1] == "stream" || parts[1] == "acks")):
		writeErrD(w, http.StatusMethodNotAllowed, aep.CodeDProtocolError, "method not allowed", false, nil)
	default:
		writeErrD(w, http.StatusNotFound, aep.CodeDProtocolError, "not found", false, nil)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (h *SubscriptionsHandlerD) unavailable(w http.ResponseWriter, tenant, what string, err error) {
	h.cfg.Logger.Warn().Err(err).Str("tenant", tenant).Msg("delivery: subscriptions: " + what)
	writeErrD(w, http.StatusServiceUnavailable, aep.CodeDInternalError, "the subscription store is not available", true, nil)
}

func notFound(w http.ResponseWriter, id string) {
	writeErrD(w, http.StatusNotFound, aep.CodeDSubscriptionError, "no subscription "+id, false, map[string]string{"subscription_id": id})
}

// createRequestD is what POST /aep/subscriptions reads besides the filter.
type createRequestD struct {
	Type         string          `json:"type"`
	Payload      json.RawMessage `json:"payload"`
	ExpiresAt    *string         `json:"expires_at"`
	AckTimeoutMS *int64          `json:"ack_timeout_ms"`
	MaxAttempts  *int            `json:"max_attempts"`
}

// subscriptionView is the subscription.created payload and the list entry.
type subscriptionView struct {
	ID           string          `json:"subscription_id"`
	Filter       json.RawMessage `json:"filter"`
	DeliveryMode string          `json:"delivery_mode"`
	ExpiresAt    *time.Time      `json:"expires_at"`
	CreatedAt    time.Time       `json:"created_at"`
	AckTimeoutMS int64           `json:"ack_timeout_ms"`
	MaxAttempts  int             `json:"max_attempts"`
}

func (h *SubscriptionsHandlerD) view(def SubscriptionDef) subscriptionView {
	pol := h.policy(def)
	return subscriptionView{
		ID: def.ID, Filter: def.Filter, DeliveryMode: def.DeliveryMode, ExpiresAt: def.ExpiresAt, CreatedAt: def.CreatedAt,
		AckTimeoutMS: pol.AckTimeout.Milliseconds(), MaxAttempts: pol.MaxAttempts,
	}
}

func (h *SubscriptionsHandlerD) policy(def SubscriptionDef) AckPolicy {
	pol := h.cfg.Policy
	if def.AckTimeoutMS > 0 {
		pol.AckTimeout = time.Duration(def.AckTimeoutMS) * time.Millisecond
	}
	if def.MaxAttempts > 0 {
		pol.MaxAttempts = def.MaxAttempts
	}
	return pol
}

// parseCreateD reads the body of POST /aep/subscriptions: a
// subscription.requested envelope or its payload alone (the filter, plus
// expires_at, ack_timeout_ms and max_attempts). A refusal is a
// *filtering.Error.
func parseCreateD(body []byte, now time.Time) (*filtering.Filter, SubscriptionDef, error) {
	var def SubscriptionDef
	var env createRequestD
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, def, &filtering.Error{Message: "the body must be a JSON object: " + err.Error()}
	}
	payload := json.RawMessage(body)
	if env.Type != "" {
		if env.Type != "subscription.requested" {
			return nil, def, &filtering.Error{Field: "type", Message: "type must be subscription.requested"}
		}
		payload = env.Payload
		env = createRequestD{}
		if len(bytes.TrimSpace(payload)) == 0 {
			payload = json.RawMessage("{}")
		}
		if err := json.Unmarshal(payload, &env); err != nil {
			return nil, def, &filtering.Error{Field: "payload", Message: "payload must be a JSON object"}
		}
	}
	f, err := filtering.ParseD(payload)
	if err != nil {
		return nil, def, err
	}
	switch f.DeliveryMode() {
	case "", ModeAtLeastOnce:
	default:
		return nil, def, &filtering.Error{Field: "delivery_mode", Message: "durable subscriptions are at_least_once; use GET /aep/events or the WebSocket binding for " + f.DeliveryMode()}
	}
	if env.ExpiresAt != nil {
		t, err := time.Parse(time.RFC3339Nano, *env.ExpiresAt)
		if err != nil {
			return nil, def, &filtering.Error{Field: "expires_at", Message: "expires_at must be an RFC 3339 time"}
		}
		if !t.After(now) {
			return nil, def, &filtering.Error{Field: "expires_at", Message: "expires_at is in the past"}
		}
		t = t.UTC()
		def.ExpiresAt = &t
	}
	if env.AckTimeoutMS != nil {
		d := time.Duration(*env.AckTimeoutMS) * time.Millisecond
		if d < minAckTimeout || d > maxAckTimeout {
			return nil, def, &filtering.Error{Field: "ack_timeout_ms", Message: "ack_timeout_ms must be between 100 and 3600000"}
		}
		def.AckTimeoutMS = *env.AckTimeoutMS
	}
	if env.MaxAttempts != nil {
		if *env.MaxAttempts < 1 || *env.MaxAttempts > maxMaxAttempts {
			return nil, def, &filtering.Error{Field: "max_attempts", Message: "max_attempts must be between 1 and 100"}
		}
		def.MaxAttempts = *env.MaxAttempts
	}
	norm, err := f.MarshalJSON()
	if err != nil {
		return nil, def, err
	}
	def.Filter = norm
	def.DeliveryMode = ModeAtLeastOnce
	def.CreatedAt = now.UTC()
	return f, def, nil
}

func (h *SubscriptionsHandlerD) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			writeErrD(w, http.StatusRequestEntityTooLarge, aep.CodeDInvalidEnvelope, "body too large", false, nil)
		} else {
			writeErrD(w, http.StatusBadRequest, aep.CodeDInvalidEnvelope, "body could not be read", false, nil)
		}
		return nil, false
	}
	return b, true
}

func (h *SubscriptionsHandlerD) create(w http.ResponseWriter, r *http.Request) {
	tenant := h.tenant(r)
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	f, def, err := parseCreateD(body, time.Now())
	if err != nil {
		msg, det := rejectionOf(err)
		reject(w, msg, det)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.SetupTimeout)
	defer cancel()
	st, err := h.e.State(ctx, tenant)
	if err != nil {
		h.unavailable(w, tenant, "topic state", err)
		return
	}
	start := make([]cursor.PartitionOffset, st.Partitions)
	for p := range start {
		start[p] = cursor.PartitionOffset{Partition: int32(p), Offset: st.End[p]}
	}
	if from := f.FromCursor(); from != "" {
		c, err := h.kr.Decode(tenant, from)
		if err != nil {
			det := map[string]string{"field": "from_cursor"}
			var ce *cursor.Error
			if errors.As(err, &ce) {
				det["cursor_error"] = string(ce.Code)
			}
			reject(w, "the cursor cannot be used: "+err.Error(), det)
			return
		}
		checked, _ := st.Check(c) // gaps are logged when the stream opens
		for _, po := range checked {
			if po.Partition >= 0 && po.Partition < st.Partitions {
				start[po.Partition] = po
			}
		}
	}
	def.ID = "sub_" + ulid.Make().String()
	if err := h.e.CommitStart(ctx, tenant, SubscriptionGroup(tenant, def.ID), st, start); err != nil {
		h.unavailable(w, tenant, "commit start", err)
		return
	}
	if err := h.e.PutSubscription(ctx, tenant, def); err != nil {
		h.unavailable(w, tenant, "write definition", err)
		return
	}
	out := struct {
		subscriptionView
		// Cursor is the starting position, usable with GET /aep/events.
		Cursor string `json:"cursor,omitempty"`
	}{subscriptionView: h.view(def)}
	if cur, err := h.kr.Encode(tenant, cursor.Cursor{Topic: st.ID.Tag(), Partitions: st.Partitions, Offsets: start}); err == nil {
		out.Cursor = cur
	}
	w.Header().Set("Location", "/aep/subscriptions/"+def.ID)
	writeJSON(w, http.StatusCreated, out)
}

func (h *SubscriptionsHandlerD) lookup(w http.ResponseWriter, r *http.Request, id string) (SubscriptionDef, bool) {
	tenant := h.tenant(r)
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.SetupTimeout)
	defer cancel()
	defs, err := h.e.Subscriptions(ctx, tenant)
	if err != nil {
		h.unavailable(w, tenant, "read definitions", err)
		return SubscriptionDef{}, false
	}
	def, ok := defs[id]
	if !ok {
		notFound(w, id)
		return def, false
	}
	if def.Expired(time.Now()) {
		writeErrD(w, http.StatusGone, aep.CodeDSubscriptionError, "subscription "+id+" expired", false, map[string]string{"subscription_id": id})
		return def, false
	}
	return def, true
}

func (h *SubscriptionsHandlerD) list(w http.ResponseWriter, r *http.Request) {
	tenant := h.tenant(r)
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.SetupTimeout)
	defer cancel()
	defs, err := h.e.Subscriptions(ctx, tenant)
	if err != nil {
		h.unavailable(w, tenant, "read definitions", err)
		return
	}
	out := struct {
		Subscriptions []subscriptionView `json:"subscriptions"`
	}{Subscriptions: []subscriptionView{}}
	now := time.Now()
	for _, def := range defs {
		if !def.Expired(now) {
			out.Subscriptions = append(out.Subscriptions, h.view(def))
		}
	}
	sortViews(out.Subscriptions)
	writeJSON(w, http.StatusOK, out)
}

func sortViews(v []subscriptionView) {
	slices.SortFunc(v, func(a, b subscriptionView) int { return strings.Compare(a.ID, b.ID) })
}

// partitionStateD is one partition of GET /aep/subscriptions/{id}.
type partitionStateD struct {
	Partition int32 `json:"partition"`
	Committed int64 `json:"committed"`
	End       int64 `json:"end"`
	Lag       int64 `json:"lag"`
}

func (h *SubscriptionsHandlerD) get(w http.ResponseWriter, r *http.Request, id string) {
	def, ok := h.lookup(w, r, id)
	if !ok {
		return
	}
	tenant := h.tenant(r)
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.SetupTimeout)
	defer cancel()
	st, err := h.e.State(ctx, tenant)
	if err != nil {
		h.unavailable(w, tenant, "topic state", err)
		return
	}
	_, pcs, _, err := fetchDurable(ctx, h.e.adm, SubscriptionGroup(tenant, id), h.e.cfg.Naming.Events(tenant))
	if err != nil {
		h.unavailable(w, tenant, "committed offsets", err)
		return
	}
	out := struct {
		subscriptionView
		Committed    []partitionStateD `json:"committed"`
		Lag          int64             `json:"lag"`
		Streaming    bool              `json:"streaming"`
		PendingAcks  int               `json:"pending_acks"`
		Redeliveries uint64            `json:"redeliveries"`
		DeadLettered uint64            `json:"dead_lettered"`
		Acked        uint64            `json:"acked"`
	}{subscriptionView: h.view(def), Committed: []partitionStateD{}}
	for p := int32(0); p < st.Partitions; p++ {
		ps := partitionStateD{Partition: p, Committed: -1, End: st.End[p]}
		if pc, ok := pcs[p]; ok {
			ps.Committed = pc.Offset
			ps.Lag = max(st.End[p]-pc.Offset, 0)
			out.Lag += ps.Lag
		}
		out.Committed = append(out.Committed, ps)
	}
	if s := h.activeStream(tenant, id); s != nil {
		ds := s.Stats()
		out.Streaming, out.PendingAcks, out.Redeliveries, out.DeadLettered, out.Acked = true, ds.Pending, ds.Redeliveries, ds.DeadLettered, ds.Acked
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *SubscriptionsHandlerD) delete(w http.ResponseWriter, r *http.Request, id string) {
	tenant := h.tenant(r)
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.SetupTimeout)
	defer cancel()
	defs, err := h.e.Subscriptions(ctx, tenant)
	if err != nil {
		h.unavailable(w, tenant, "read definitions", err)
		return
	}
	if _, ok := defs[id]; !ok {
		notFound(w, id)
		return
	}
	if s := h.activeStream(tenant, id); s != nil {
		s.Close() // its SSE handler ends when the channel closes
	}
	if err := h.e.DeleteSubscription(ctx, tenant, id); err != nil {
		h.unavailable(w, tenant, "delete definition", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *SubscriptionsHandlerD) activeStream(tenant, id string) *DurableStream {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.active[tenant+"/"+id]
}
