package dialectd

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// DefaultAdHocGrace is how long the subscription of an ad-hoc
// at_least_once stream outlives its last stream (SubscriptionsConfig.AdHocGrace).
const DefaultAdHocGrace = time.Minute

// Events serves GET /aep/events: delivery_mode=at_least_once goes to subs
// (an ad-hoc stream backed by a subscription of its own, AdHoc), every
// other mode to sse.
func Events(sse http.Handler, subs *SubscriptionsHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("delivery_mode") == ModeAtLeastOnce {
			subs.AdHoc(w, r)
			return
		}
		sse.ServeHTTP(w, r)
	})
}

// adHocParams are the query parameters of an ad-hoc at_least_once stream
// that are not the filter: the subscription's own redelivery policy.
var adHocParams = [...]string{"ack_timeout_ms", "max_attempts", "max_ack_pending"}

// AdHoc serves GET /aep/events?delivery_mode=at_least_once. A new stream
// makes a durable subscription for itself (the query's filter and
// ack_timeout_ms, max_attempts, max_ack_pending; from_cursor, or
// Last-Event-ID, as its start) marked with a grace, and streams it as GET
// /aep/subscriptions/{id}/stream does: its id is in the AEP-Subscription-Id
// header and in every event.redelivered, acks go to POST
// /aep/subscriptions/{id}/acks. subscription_id=<id> resumes that
// subscription's stream on any node (its unacknowledged events come
// again); one whose grace passed is 410 subscription_error.
func (h *SubscriptionsHandler) AdHoc(w http.ResponseWriter, r *http.Request) {
	if !transport.CanStream(w) {
		writeErr(w, http.StatusInternalServerError, aep.CodeDInternalError, "streaming is not supported on this connection", false, nil)
		return
	}
	q := r.URL.Query()
	if id := q.Get("subscription_id"); id != "" {
		h.resumeAdHoc(w, r, id)
		return
	}
	tn := requestTenant(r)
	f, def, err := adHocDef(q, time.Now())
	if err != nil {
		msg, det := rejectionOf(err)
		reject(w, msg, det)
		return
	}
	if refuseScope(w, tn, f) {
		return
	}
	stream, ok := admit(w, h.hub, tn) // the stream cap refuses before anything is stored
	if !ok {
		return
	}
	from := f.FromCursor()
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		from = id // as on the other modes: an EventSource's reconnect
	}
	grace := h.cfg.AdHocGrace
	exp := time.Now().Add(grace).UTC()
	def.GraceMS, def.ExpiresAt = grace.Milliseconds(), &exp
	if def, _, ok = h.put(w, r, def, from); !ok {
		stream.Leave()
		return
	}
	h.open(w, r, def, stream)
}

// adHocDef is the subscription of a new ad-hoc stream from its query, under
// the checks of POST /aep/subscriptions (parseCreate).
func adHocDef(q map[string][]string, now time.Time) (*filtering.Filter, durable.SubscriptionDef, error) {
	f, err := filtering.ParseDQuery(q)
	if err != nil {
		return nil, durable.SubscriptionDef{}, err
	}
	norm, err := f.MarshalJSON()
	if err != nil {
		return nil, durable.SubscriptionDef{}, err
	}
	body := map[string]json.RawMessage{}
	if err := json.Unmarshal(norm, &body); err != nil {
		return nil, durable.SubscriptionDef{}, err
	}
	for _, k := range adHocParams {
		vs := q[k]
		if len(vs) == 0 {
			continue
		}
		n, err := strconv.ParseInt(vs[0], 10, 64)
		if err != nil || len(vs) > 1 {
			return nil, durable.SubscriptionDef{}, &filtering.Error{Field: k, Message: k + " must be one integer"}
		}
		body[k] = json.RawMessage(strconv.FormatInt(n, 10))
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, durable.SubscriptionDef{}, err
	}
	return parseCreate(b, now)
}

// resumeAdHoc opens the stream of the ad-hoc subscription id again: 410
// subscription_error when it is gone (its grace passed: the events it had
// not had acknowledged are not tracked any more, and saying so beats a
// silent new start), 404 for an id that is not an ad-hoc stream's.
func (h *SubscriptionsHandler) resumeAdHoc(w http.ResponseWriter, r *http.Request, id string) {
	defs, ok := h.defs(w, r)
	if !ok {
		return
	}
	def, known := defs[id]
	det := map[string]string{"subscription_id": id}
	switch {
	case !known || def.Expired(time.Now()):
		if !strings.HasPrefix(id, "sub_") || len(id) > 64 {
			notFound(w, "") // never one of ours: the id is not echoed
			return
		}
		writeErr(w, http.StatusGone, aep.CodeDSubscriptionError,
			"subscription "+id+" is gone: its stream ended more than its grace ago (or it never existed), and what it had not had acknowledged is no longer tracked; open a new stream, from_cursor the last cursor you processed",
			false, det)
		return
	case def.GraceMS == 0:
		writeErr(w, http.StatusNotFound, aep.CodeDSubscriptionError, "subscription "+id+" is not an ad-hoc stream's: stream it at /aep/subscriptions/"+id+"/stream", false, det)
		return
	}
	if _, ok := h.find(w, r, id, false); !ok { // the scope check of every use
		return
	}
	h.open(w, r, def, nil)
}

// keepAlive moves the ad-hoc subscription def's expiry to now + its grace
// while its stream is open or waits to open (at once and every grace/3, from a goroutine the returned
// stop ends and waits for), and once more when stop is called: it expires
// a grace after its last stream ended, on whichever node. A definition
// that is gone or expired (deleted, swept) is never written again.
func (h *SubscriptionsHandler) keepAlive(tn tenant.Tenant, def durable.SubscriptionDef) func() {
	grace := time.Duration(def.GraceMS) * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(max(grace/3, 10*time.Millisecond))
		defer tk.Stop()
		for {
			h.renew(ctx, tn, def)
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
		ctx, cancel := context.WithTimeout(context.Background(), h.cfg.SetupTimeout)
		defer cancel()
		h.renew(ctx, tn, def)
	}
}

// renew writes def with expires_at = now + grace if its stored definition
// is still live.
func (h *SubscriptionsHandler) renew(ctx context.Context, tn tenant.Tenant, def durable.SubscriptionDef) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.SetupTimeout)
	defer cancel()
	defs, err := h.e.Subscriptions(ctx, tn)
	if err != nil {
		return // the next tick tries again; the grace is three ticks
	}
	cur, ok := defs[def.ID]
	if !ok || cur.Expired(time.Now()) {
		return
	}
	exp := time.Now().Add(time.Duration(def.GraceMS) * time.Millisecond).UTC()
	cur.ExpiresAt = &exp
	if err := h.e.PutSubscription(ctx, tn, cur); err != nil && ctx.Err() == nil {
		h.cfg.Logger.Warn().Err(err).Str("subscription", def.ID).Msg("dialectd: renew an ad-hoc stream's subscription")
	}
}
