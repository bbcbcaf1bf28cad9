package dialectd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// SubscriptionsConfig configures the durable subscriptions API. Zero fields mean
// the documented defaults.
type SubscriptionsConfig struct {
	// Heartbeat, WriteTimeout and Batch are the SSE stream's, as in
	// SSEConfig (15s, 10s, 64).
	Heartbeat    time.Duration
	WriteTimeout time.Duration
	Batch        int
	// Window bounds pending deliveries per partition of a stream (1024).
	Window int
	// Policy is the default redelivery policy (D reliability.md defaults);
	// a subscription may set its own ack_timeout_ms and max_attempts.
	Policy durable.AckPolicy
	// CommitInterval of the streams (1s).
	CommitInterval time.Duration
	// MaxBodyBytes bounds request bodies (1 MiB).
	MaxBodyBytes int64
	// SetupTimeout bounds the Kafka work of one request (10s).
	SetupTimeout time.Duration
	// MaxPerTenant caps the live durable subscriptions of a tenant (across
	// the cluster, as the subscriptions topic holds them); past it a create
	// is refused with 429. Zero means no cap.
	MaxPerTenant int
	// Hub admits each stream with every other stream of the node
	// (per-tenant cap) and ends it on shutdown. Nil means a Hub of the
	// handler's own, without a cap.
	Hub *transport.Hub
	// AdHocGrace is how long the subscription of an ad-hoc at_least_once
	// stream (GET /aep/events) outlives its last stream, for a reconnect
	// on any node (DefaultAdHocGrace).
	AdHocGrace time.Duration
	Logger     zerolog.Logger
}

// Bounds of what a client may set or have stored (docs/security.md).
const (
	minAckTimeout  = 100 * time.Millisecond
	maxAckTimeout  = time.Hour
	maxMaxAttempts = 100
	// MaxMaxAckPending bounds a subscription's max_ack_pending (what a
	// stream may hold in memory as pending: the events themselves).
	MaxMaxAckPending = 10000
	maxAcksPerBatch  = 10000
	// MaxFilterBytes bounds a subscription's stored (normalized) filter.
	MaxFilterBytes = 8 << 10
	// MaxAckIDBytes bounds an acknowledged_event_id.
	MaxAckIDBytes = 256
	// MaxRejectCodeBytes and MaxRejectMessageBytes bound a rejection's
	// error.code and error.message (stored in the journal and the dead
	// letter).
	MaxRejectCodeBytes    = 64
	MaxRejectMessageBytes = 2048
)

// SubscriptionsHandler serves dialect D's durable subscriptions:
//
//	POST   /aep/subscriptions              create (201, subscription.created payload)
//	GET    /aep/subscriptions              list
//	GET    /aep/subscriptions/{id}         state: filter, mode, committed position, lag, pending acks, redeliveries
//	DELETE /aep/subscriptions/{id}         delete (204)
//	GET    /aep/subscriptions/{id}/stream  SSE stream (at_least_once)
//	POST   /aep/subscriptions/{id}/acks    a batch of event.acknowledged / event.rejected
//
// One stream per subscription is open in the cluster at a time: the newest
// stream request, on any node, takes it over (docs/durable-cluster.md).
// Acks posted on any node are made durable in the tenant's subscription
// journal before the answer, and applied by the stream's holder.
type SubscriptionsHandler struct {
	e   *durable.Cluster
	kr  *cursor.Keyring
	cfg SubscriptionsConfig

	mu     sync.Mutex
	hub    *transport.Hub
	active map[string]*durable.DurableStream // by tenant + "/" + id; guarded by mu
}

// NewSubscriptionsHandler returns the handler; mount it at
// /aep/subscriptions and /aep/subscriptions/*.
func NewSubscriptionsHandler(e *durable.Cluster, kr *cursor.Keyring, cfg SubscriptionsConfig) *SubscriptionsHandler {
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
	if cfg.AdHocGrace <= 0 {
		cfg.AdHocGrace = DefaultAdHocGrace
	}
	cfg.Policy = cfg.Policy.WithDefaults()
	return &SubscriptionsHandler{e: e, kr: kr, cfg: cfg, hub: hubOf(cfg.Hub), active: map[string]*durable.DurableStream{}}
}

func (h *SubscriptionsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/aep/subscriptions")
	if !ok {
		writeErr(w, http.StatusNotFound, aep.CodeDProtocolError, "not found", false, nil)
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
		writeErr(w, http.StatusMethodNotAllowed, aep.CodeDProtocolError, "method not allowed", false, nil)
	default:
		writeErr(w, http.StatusNotFound, aep.CodeDProtocolError, "not found", false, nil)
	}
}

func (h *SubscriptionsHandler) unavailable(w http.ResponseWriter, tn tenant.Tenant, what string, err error) {
	h.cfg.Logger.Warn().Err(err).Stringer("tenant", tn).Msg("dialectd: subscriptions: " + what)
	if partitioning.IsProvisioningError(err) {
		writeErr(w, http.StatusServiceUnavailable, aep.CodeDInternalError, "the subscription store is not available: "+err.Error(), false, nil)
		return
	}
	writeErr(w, http.StatusServiceUnavailable, aep.CodeDInternalError, "the subscription store is not available", true, nil)
}

func notFound(w http.ResponseWriter, id string) {
	writeErr(w, http.StatusNotFound, aep.CodeDSubscriptionError, "no subscription "+id, false, map[string]string{"subscription_id": id})
}

// createRequest is what POST /aep/subscriptions reads besides the filter.
type createRequest struct {
	Type          string          `json:"type"`
	Payload       json.RawMessage `json:"payload"`
	ExpiresAt     *string         `json:"expires_at"`
	AckTimeoutMS  *int64          `json:"ack_timeout_ms"`
	MaxAttempts   *int            `json:"max_attempts"`
	MaxAckPending *int            `json:"max_ack_pending"`
}

// subscriptionView is the subscription.created payload and the list entry.
type subscriptionView struct {
	ID            string          `json:"subscription_id"`
	Filter        json.RawMessage `json:"filter"`
	DeliveryMode  string          `json:"delivery_mode"`
	ExpiresAt     *time.Time      `json:"expires_at"`
	CreatedAt     time.Time       `json:"created_at"`
	AckTimeoutMS  int64           `json:"ack_timeout_ms"`
	MaxAttempts   int             `json:"max_attempts"`
	MaxAckPending int             `json:"max_ack_pending"`
}

func (h *SubscriptionsHandler) view(def durable.SubscriptionDef) subscriptionView {
	pol := h.policy(def)
	return subscriptionView{
		ID: def.ID, Filter: def.Filter, DeliveryMode: def.DeliveryMode, ExpiresAt: def.ExpiresAt, CreatedAt: def.CreatedAt,
		AckTimeoutMS: pol.AckTimeout.Milliseconds(), MaxAttempts: pol.MaxAttempts, MaxAckPending: maxAckPendingOf(def),
	}
}

// maxAckPendingOf is the subscription's cap on delivered but
// unacknowledged events.
func maxAckPendingOf(def durable.SubscriptionDef) int {
	if def.MaxAckPending > 0 {
		return def.MaxAckPending
	}
	return durable.DefaultMaxAckPending
}

func (h *SubscriptionsHandler) policy(def durable.SubscriptionDef) durable.AckPolicy {
	return policyOf(h.cfg.Policy, def)
}

// policyOf is base with the subscription's own ack timeout and attempts.
func policyOf(pol durable.AckPolicy, def durable.SubscriptionDef) durable.AckPolicy {
	pol = pol.WithDefaults()
	if def.AckTimeoutMS > 0 {
		pol.AckTimeout = time.Duration(def.AckTimeoutMS) * time.Millisecond
	}
	if def.MaxAttempts > 0 {
		pol.MaxAttempts = def.MaxAttempts
	}
	return pol
}

// parseCreate reads the body of POST /aep/subscriptions: a
// subscription.requested envelope or its payload alone (the filter, plus
// expires_at, ack_timeout_ms, max_attempts and max_ack_pending). A refusal is a
// *filtering.Error.
func parseCreate(body []byte, now time.Time) (*filtering.Filter, durable.SubscriptionDef, error) {
	var def durable.SubscriptionDef
	var env createRequest
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, def, &filtering.Error{Message: "the body must be a JSON object: " + err.Error()}
	}
	payload := json.RawMessage(body)
	if env.Type != "" {
		if env.Type != "subscription.requested" {
			return nil, def, &filtering.Error{Field: "type", Message: "type must be subscription.requested"}
		}
		payload = env.Payload
		env = createRequest{}
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
	if env.MaxAckPending != nil {
		if *env.MaxAckPending < 1 || *env.MaxAckPending > MaxMaxAckPending {
			return nil, def, &filtering.Error{Field: "max_ack_pending", Message: "max_ack_pending must be between 1 and " + strconv.Itoa(MaxMaxAckPending)}
		}
		def.MaxAckPending = *env.MaxAckPending
	}
	norm, err := f.MarshalJSON()
	if err != nil {
		return nil, def, err
	}
	if len(norm) > MaxFilterBytes {
		return nil, def, &filtering.Error{Field: "filter", Message: "the filter is longer than " + strconv.Itoa(MaxFilterBytes) + " bytes once normalized"}
	}
	def.Filter = norm
	def.DeliveryMode = ModeAtLeastOnce
	def.CreatedAt = now.UTC()
	return f, def, nil
}

func (h *SubscriptionsHandler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			writeErr(w, http.StatusRequestEntityTooLarge, aep.CodeDInvalidEnvelope, "body too large", false, nil)
		} else {
			writeErr(w, http.StatusBadRequest, aep.CodeDInvalidEnvelope, "body could not be read", false, nil)
		}
		return nil, false
	}
	return b, true
}

func (h *SubscriptionsHandler) create(w http.ResponseWriter, r *http.Request) {
	tn := requestTenant(r)
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	f, def, err := parseCreate(body, time.Now())
	if err != nil {
		msg, det := rejectionOf(err)
		reject(w, msg, det)
		return
	}
	if refuseScope(w, tn, f) {
		return
	}
	def, cur, ok := h.put(w, r, def, f.FromCursor())
	if !ok {
		return
	}
	out := struct {
		subscriptionView
		// Cursor is the starting position, usable with GET /aep/events.
		Cursor string `json:"cursor,omitempty"`
	}{subscriptionView: h.view(def), Cursor: cur}
	w.Header().Set("Location", "/aep/subscriptions/"+def.ID)
	transport.WriteJSON(w, http.StatusCreated, out)
}

// put makes the subscription def under a new id: its start (the end
// offsets, or from's checked position) committed, then its definition
// written, under the tenant's cap (429 past it). It returns def with its id
// and the signed starting cursor, or answers the refusal.
func (h *SubscriptionsHandler) put(w http.ResponseWriter, r *http.Request, def durable.SubscriptionDef, from string) (durable.SubscriptionDef, string, bool) {
	tn := requestTenant(r)
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.SetupTimeout)
	defer cancel()
	st, err := h.e.State(ctx, tn)
	if err != nil {
		h.unavailable(w, tn, "topic state", err)
		return def, "", false
	}
	start := make([]cursor.PartitionOffset, st.Partitions)
	for p := range start {
		start[p] = cursor.PartitionOffset{Partition: int32(p), Offset: st.End[p]}
	}
	if from != "" {
		c, err := h.kr.Decode(tn.String(), from)
		if err != nil {
			det := map[string]string{"field": "from_cursor"}
			var ce *cursor.Error
			if errors.As(err, &ce) {
				det["cursor_error"] = string(ce.Code)
			}
			reject(w, "the cursor cannot be used: "+err.Error(), det)
			return def, "", false
		}
		checked, _ := st.Check(c) // gaps are logged when the stream opens
		for _, po := range checked {
			if po.Partition >= 0 && po.Partition < st.Partitions {
				start[po.Partition] = po
			}
		}
	}
	if h.cfg.MaxPerTenant > 0 {
		defs, ok := h.defs(w, r)
		if !ok {
			return def, "", false
		}
		if n := liveCount(defs, time.Now()); n >= h.cfg.MaxPerTenant {
			h.e.Refused("durable_subscriptions_per_tenant")
			writeErr(w, http.StatusTooManyRequests, aep.CodeDSubscriptionRejected,
				"the tenant holds "+strconv.Itoa(n)+" durable subscriptions, the most allowed (--max-durable-subscriptions-per-tenant); delete one first",
				false, map[string]string{"limit": "max_durable_subscriptions_per_tenant", "max": strconv.Itoa(h.cfg.MaxPerTenant)})
			return def, "", false
		}
	}
	def.ID = "sub_" + ulid.Make().String()
	if err := h.e.CommitStart(ctx, tn, durable.SubscriptionGroup(tn, def.ID), st, start); err != nil {
		h.unavailable(w, tn, "commit start", err)
		return def, "", false
	}
	if err := h.e.PutSubscription(ctx, tn, def); err != nil {
		h.unavailable(w, tn, "write definition", err)
		return def, "", false
	}
	cur, _ := h.kr.Encode(tn.String(), cursor.Cursor{Topic: st.ID.Tag(), Partitions: st.Partitions, Offsets: start})
	return def, cur, true
}

// find reads the tenant's definitions (the node's follower of the
// subscriptions topic) and the one named id: 404 when unknown, 410 when
// expired unless expiredOK.
func (h *SubscriptionsHandler) find(w http.ResponseWriter, r *http.Request, id string, expiredOK bool) (durable.SubscriptionDef, bool) {
	defs, ok := h.defs(w, r)
	if !ok {
		return durable.SubscriptionDef{}, false
	}
	def, ok := defs[id]
	if !ok {
		notFound(w, id)
		return def, false
	}
	if !expiredOK && def.Expired(time.Now()) {
		writeErr(w, http.StatusGone, aep.CodeDSubscriptionError, "subscription "+id+" expired", false, map[string]string{"subscription_id": id})
		return def, false
	}
	// A principal works only with the subscriptions it could have made:
	// another's broader one is neither read, acknowledged nor deleted.
	if tn := requestTenant(r); tn.Principal().Restricted() {
		f, err := filtering.ParseD(def.Filter)
		if err != nil || refuseScope(w, tn, f) {
			if err != nil {
				writeErr(w, http.StatusInternalServerError, aep.CodeDInternalError, "the stored subscription is unreadable", false, nil)
			}
			return def, false
		}
	}
	return def, true
}

// mayUse reports whether t's principal could have made def (its scopes
// cover def's filter): the list shows a principal only those.
func mayUse(t tenant.Tenant, def durable.SubscriptionDef) bool {
	if !t.Principal().Restricted() {
		return true
	}
	f, err := filtering.ParseD(def.Filter)
	return err == nil && scopeRefusal(t, f) == ""
}

// defs is the request tenant's definitions (503 answered when they cannot
// be read).
func (h *SubscriptionsHandler) defs(w http.ResponseWriter, r *http.Request) (map[string]durable.SubscriptionDef, bool) {
	tn := requestTenant(r)
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.SetupTimeout)
	defer cancel()
	defs, err := h.e.Subscriptions(ctx, tn)
	if err != nil {
		h.unavailable(w, tn, "read definitions", err)
		return nil, false
	}
	return defs, true
}

func (h *SubscriptionsHandler) lookup(w http.ResponseWriter, r *http.Request, id string) (durable.SubscriptionDef, bool) {
	return h.find(w, r, id, false)
}

func liveCount(defs map[string]durable.SubscriptionDef, now time.Time) int {
	n := 0
	for _, def := range defs {
		if !def.Expired(now) {
			n++
		}
	}
	return n
}

func (h *SubscriptionsHandler) list(w http.ResponseWriter, r *http.Request) {
	defs, ok := h.defs(w, r)
	if !ok {
		return
	}
	out := struct {
		Subscriptions []subscriptionView `json:"subscriptions"`
	}{Subscriptions: []subscriptionView{}}
	now := time.Now()
	tn := requestTenant(r)
	for _, def := range defs {
		if !def.Expired(now) && mayUse(tn, def) {
			out.Subscriptions = append(out.Subscriptions, h.view(def))
		}
	}
	sortViews(out.Subscriptions)
	transport.WriteJSON(w, http.StatusOK, out)
}

func sortViews(v []subscriptionView) {
	slices.SortFunc(v, func(a, b subscriptionView) int { return strings.Compare(a.ID, b.ID) })
}

// partitionState is one partition of GET /aep/subscriptions/{id}.
type partitionState struct {
	Partition int32 `json:"partition"`
	Committed int64 `json:"committed"`
	End       int64 `json:"end"`
	Lag       int64 `json:"lag"`
}

func (h *SubscriptionsHandler) get(w http.ResponseWriter, r *http.Request, id string) {
	def, ok := h.lookup(w, r, id)
	if !ok {
		return
	}
	tn := requestTenant(r)
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.SetupTimeout)
	defer cancel()
	st, err := h.e.State(ctx, tn)
	if err != nil {
		h.unavailable(w, tn, "topic state", err)
		return
	}
	committed, err := h.e.Committed(ctx, tn, durable.SubscriptionGroup(tn, id))
	if err != nil {
		h.unavailable(w, tn, "committed offsets", err)
		return
	}
	out := struct {
		subscriptionView
		Committed    []partitionState `json:"committed"`
		Lag          int64            `json:"lag"`
		Streaming    bool             `json:"streaming"`
		PendingAcks  int              `json:"pending_acks"`
		Redeliveries uint64           `json:"redeliveries"`
		DeadLettered uint64           `json:"dead_lettered"`
		Acked        uint64           `json:"acked"`
		Handed       uint64           `json:"handed"`
	}{subscriptionView: h.view(def), Committed: []partitionState{}}
	for p := int32(0); p < st.Partitions; p++ {
		ps := partitionState{Partition: p, Committed: -1, End: st.End[p]}
		if off, ok := committed[p]; ok {
			ps.Committed = off
			ps.Lag = max(st.End[p]-off, 0)
			out.Lag += ps.Lag
		}
		out.Committed = append(out.Committed, ps)
	}
	if s := h.activeStream(tn, id); s != nil {
		ds := s.Stats()
		out.Streaming, out.PendingAcks, out.Redeliveries, out.DeadLettered, out.Acked = true, ds.Pending, ds.Redeliveries, ds.DeadLettered, ds.Acked
		out.Handed = ds.Handed
	}
	transport.WriteJSON(w, http.StatusOK, out)
}

func (h *SubscriptionsHandler) delete(w http.ResponseWriter, r *http.Request, id string) {
	if _, ok := h.find(w, r, id, true); !ok {
		return
	}
	tn := requestTenant(r)
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.SetupTimeout)
	defer cancel()
	if s := h.activeStream(tn, id); s != nil {
		s.Close() // its SSE handler ends when the channel closes
	}
	if err := h.e.DeleteSubscription(ctx, tn, id); err != nil {
		h.unavailable(w, tn, "delete definition", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *SubscriptionsHandler) activeStream(tn tenant.Tenant, id string) *durable.DurableStream {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.active[tn.String()+"/"+id]
}
