package dialectd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/internal/tracing"
)

// stream serves GET /aep/subscriptions/{id}/stream: the subscription's
// events from its committed offsets, as SSE, in at_least_once mode.
func (h *SubscriptionsHandler) stream(w http.ResponseWriter, r *http.Request, id string) {
	if !transport.CanStream(w) {
		writeErr(w, http.StatusInternalServerError, aep.CodeDInternalError, "streaming is not supported on this connection", false, nil)
		return
	}
	def, ok := h.lookup(w, r, id)
	if !ok {
		return
	}
	tn := requestTenant(r)
	f, err := filtering.ParseD(def.Filter)
	if err != nil {
		h.cfg.Logger.Error().Err(err).Str("subscription", id).Msg("dialectd: stored filter does not parse")
		writeErr(w, http.StatusInternalServerError, aep.CodeDInternalError, "the stored subscription is unreadable", false, nil)
		return
	}
	stream, ok := admit(w, h.hub, tn)
	if !ok {
		return
	}
	defer stream.Leave()
	key := tn.String() + "/" + id
	h.mu.Lock()
	if _, busy := h.active[key]; busy {
		h.mu.Unlock()
		writeErr(w, http.StatusConflict, aep.CodeDSubscriptionError, "subscription "+id+" already has an open stream", true, map[string]string{"subscription_id": id})
		return
	}
	h.active[key] = nil // reserved while opening
	h.mu.Unlock()
	release := func() {
		h.mu.Lock()
		delete(h.active, key)
		h.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.SetupTimeout)
	st, err := h.e.State(ctx, tn)
	var s *engine.DurableStream
	if err == nil {
		req := engine.DurableRequest{
			Tenant: tn, SubscriptionID: id, Group: engine.SubscriptionGroup(tn, id), Filter: f,
			Policy: h.policy(def), Window: h.cfg.Window, CommitInterval: h.cfg.CommitInterval, DeadLetter: encodeDeadLetter,
		}
		if def.ExpiresAt != nil {
			req.ExpiresAt = *def.ExpiresAt
		}
		s, err = h.e.OpenDurable(ctx, req)
	}
	cancel()
	if err != nil {
		release()
		h.unavailable(w, tn, "open stream", err)
		return
	}
	h.mu.Lock()
	h.active[key] = s
	h.mu.Unlock()
	defer func() {
		s.Close()
		release()
	}()
	transport.StartSSE(w)
	dst := &durableSSE{h: h, id: id, st: &streamState{tenant: tn, mode: ModeAtLeastOnce, state: st}}
	dst.st.frontier = dst.st.fullFrontier(nil)
	dst.run(w, r, s)
}

type durableSSE struct {
	h  *SubscriptionsHandler
	id string
	st *streamState
}

func (d *durableSSE) run(w http.ResponseWriter, r *http.Request, s *engine.DurableStream) {
	cfg := transport.SSEConfig{Heartbeat: d.h.cfg.Heartbeat, WriteTimeout: d.h.cfg.WriteTimeout, Batch: d.h.cfg.Batch, Shutdown: d.h.hub.ShuttingDown()}
	if tracing.On() {
		cfg.AfterWrite = d.st.spans.End
	}
	onClose := func(buf []byte) []byte {
		if !errors.Is(s.Err(), engine.ErrExpired) {
			return buf
		}
		if ev, err := aep.DNotice("subscription.expired", aep.DSubscriptionEnded{SubscriptionID: d.id, Reason: "expired"}, time.Now()); err == nil {
			buf = appendNotice(buf, "subscription.expired", ev)
		}
		return buf
	}
	if err := transport.ServeSSE(w, r, cfg, s.Deliveries(), d.appendMessage, onClose); err != nil {
		d.h.cfg.Logger.Error().Err(err).Str("subscription", d.id).Msg("dialectd: encode message")
	}
}

func appendNotice(buf []byte, typ string, ev []byte) []byte {
	buf = append(buf, "event: "...)
	buf = append(buf, typ...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, ev...)
	return append(buf, "\n\n"...)
}

// appendMessage writes one durable delivery: a redelivery is announced by
// event.redelivered {original_event_id, attempt, subscription_id} right
// before the event itself; a dead-lettered event by event.dead_lettered.
func (d *durableSSE) appendMessage(buf []byte, dl engine.DurableDelivery) ([]byte, error) {
	if dl.Kind == engine.DurableDeadLettered {
		return appendNotice(buf, "event.dead_lettered", dl.Notice), nil
	}
	if dl.Attempt > 1 {
		ev, err := aep.DNotice("event.redelivered", aep.DRedelivered{OriginalEventID: dl.Event.Attrs.ID, Attempt: dl.Attempt, SubscriptionID: d.id}, time.Now())
		if err != nil {
			return buf, err
		}
		buf = appendNotice(buf, "event.redelivered", ev)
	}
	cur, err := d.st.cursorBytesAfter(d.h.kr, dl.Event, dl.Sequence)
	if err != nil {
		return buf, err
	}
	d.st.spans.Start(dl.Event.Record, "sse-durable", d.st.tenant.String(), dl.Sequence, dl.Attempt)
	return appendEventSSE(buf, dl.Event, ModeAtLeastOnce, dl.Sequence, cur)
}

// ackItem is one element of an acks batch: an event.acknowledged or
// event.rejected envelope (only type and payload are read).
type ackItem struct {
	Type    string `json:"type"`
	Payload struct {
		AcknowledgedEventID string      `json:"acknowledged_event_id"`
		Error               *aep.DError `json:"error"`
	} `json:"payload"`
}

// ackResult is the answer for one element.
type ackResult struct {
	AcknowledgedEventID string      `json:"acknowledged_event_id,omitempty"`
	Result              string      `json:"result"` // applied, rejected, unknown, invalid
	Error               *aep.DError `json:"error,omitempty"`
}

// parseAcks reads an acks body: a JSON array of envelopes, or one
// envelope. Elements that are not acks get an "invalid" result.
func parseAcks(body []byte) ([]ackItem, []ackResult, error) {
	body = bytes.TrimSpace(body)
	var raws []json.RawMessage
	if len(body) > 0 && body[0] == '[' {
		if err := json.Unmarshal(body, &raws); err != nil {
			return nil, nil, err
		}
	} else {
		raws = []json.RawMessage{body}
	}
	if len(raws) > maxAcksPerBatch {
		return nil, nil, errors.New("too many acks in one batch (at most " + strconv.Itoa(maxAcksPerBatch) + ")")
	}
	items := make([]ackItem, len(raws))
	res := make([]ackResult, len(raws))
	for i, raw := range raws {
		it := &items[i]
		if err := json.Unmarshal(raw, it); err != nil {
			res[i] = ackResult{Result: "invalid", Error: &aep.DError{Code: aep.CodeDInvalidEnvelope, Message: "not a JSON object"}}
			it.Type = ""
			continue
		}
		switch {
		case it.Type != "event.acknowledged" && it.Type != "event.rejected":
			res[i] = ackResult{Result: "invalid", Error: &aep.DError{Code: aep.CodeDInvalidEventType, Message: "type must be event.acknowledged or event.rejected"}}
			it.Type = ""
		case it.Payload.AcknowledgedEventID == "":
			res[i] = ackResult{Result: "invalid", Error: &aep.DError{Code: aep.CodeDInvalidEnvelope, Message: "payload.acknowledged_event_id is required"}}
			it.Type = ""
		}
	}
	return items, res, nil
}

// acks serves POST /aep/subscriptions/{id}/acks. The acks reach the
// subscription's stream open on this node; with none open, 409.
func (h *SubscriptionsHandler) acks(w http.ResponseWriter, r *http.Request, id string) {
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	items, res, err := parseAcks(body)
	if err != nil {
		writeErr(w, http.StatusBadRequest, aep.CodeDInvalidEnvelope, "the body must be an event.acknowledged / event.rejected envelope or an array of them: "+err.Error(), false, nil)
		return
	}
	s := h.activeStream(requestTenant(r), id)
	if s == nil {
		writeErr(w, http.StatusConflict, aep.CodeDSubscriptionError, "subscription "+id+" has no open stream on this node; acks go to the node serving its stream", true, map[string]string{"subscription_id": id})
		return
	}
	for i, it := range items {
		if it.Type == "" {
			continue
		}
		res[i].AcknowledgedEventID = it.Payload.AcknowledgedEventID
		if it.Type == "event.acknowledged" {
			res[i].Result = string(s.Ack(it.Payload.AcknowledgedEventID))
			continue
		}
		e := aep.DError{Code: aep.CodeDTaskError, Message: "rejected by the consumer"}
		if it.Payload.Error != nil && it.Payload.Error.Code != "" {
			e = *it.Payload.Error
		}
		res[i].Result = string(s.Reject(it.Payload.AcknowledgedEventID, e.Code, e.Message))
	}
	transport.WriteJSON(w, http.StatusOK, struct {
		Results []ackResult `json:"results"`
	}{res})
}
