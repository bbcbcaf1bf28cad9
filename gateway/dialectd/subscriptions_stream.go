package dialectd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/internal/tracing"
)

// stream serves GET /aep/subscriptions/{id}/stream: the subscription's
// events from its committed offsets, as SSE, in at_least_once mode. The
// query parameter max_ack_pending may lower the subscription's cap for
// this stream (a consumer that reads a few events and leaves is handed no
// more than it asked for).
func (h *SubscriptionsHandler) stream(w http.ResponseWriter, r *http.Request, id string) {
	if !transport.CanStream(w) {
		writeErr(w, http.StatusInternalServerError, aep.CodeDInternalError, "streaming is not supported on this connection", false, nil)
		return
	}
	def, ok := h.lookup(w, r, id)
	if !ok {
		return
	}
	h.open(w, r, def, nil)
}

// open serves the stream of def (the rest of stream); admitted is the
// place under the tenant's stream cap the caller already took, or nil.
func (h *SubscriptionsHandler) open(w http.ResponseWriter, r *http.Request, def durable.SubscriptionDef, admitted *transport.Stream) {
	id := def.ID
	tn := requestTenant(r)
	f, err := filtering.ParseD(def.Filter)
	if err != nil {
		h.cfg.Logger.Error().Err(err).Str("subscription", id).Msg("dialectd: stored filter does not parse")
		writeErr(w, http.StatusInternalServerError, aep.CodeDInternalError, "the stored subscription is unreadable", false, nil)
		return
	}
	// the stream's end owes these, whether it ends here or parked
	var fin transport.Cleanup
	defer fin.Run()
	stream := admitted
	if stream != nil {
		fin.Add(stream.Leave)
	}
	capN, ok := streamCap(w, r, def)
	if !ok {
		return
	}
	if stream == nil {
		if stream, ok = admit(w, h.hub, tn); !ok {
			return
		}
		fin.Add(stream.Leave)
	}
	key := tn.String() + "/" + id
	if def.GraceMS > 0 { // also while the claim waits for a previous holder
		fin.Add(h.keepAlive(tn, def))
	}
	// the newest stream wins, here as on any other node: its claim in the
	// journal fences an older stream of this node too
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.SetupTimeout+durable.LeaseTTL)
	st, err := h.e.State(ctx, tn)
	var s *durable.DurableStream
	wt := &waitingSSE{h: h, w: w, id: id}
	if err == nil {
		req := durable.DurableRequest{
			Tenant: tn, SubscriptionID: id, Group: durable.SubscriptionGroup(tn, id), Filter: f,
			Policy: h.policy(def), Window: h.cfg.Window, CommitInterval: h.cfg.CommitInterval, DeadLetter: encodeDeadLetter,
			OnWait:        wt.notice,
			MaxAckPending: capN,
		}
		if def.ExpiresAt != nil && def.GraceMS == 0 { // an ad-hoc stream's expiry moves while it is streamed
			req.ExpiresAt = *def.ExpiresAt
		}
		s, err = h.e.OpenDurable(ctx, req)
	}
	cancel()
	if err != nil {
		if wt.started {
			if r.Context().Err() == nil { // else the client left while it waited
				wt.refuse(tn, err) // the 200 went out with the first notice
			}
			return
		}
		h.refuseOpen(w, tn, id, err)
		return
	}
	h.mu.Lock()
	h.active[key] = s
	h.mu.Unlock()
	fin.Add(func() {
		s.Close()
		h.mu.Lock()
		if h.active[key] == s {
			delete(h.active, key)
		}
		h.mu.Unlock()
	})
	if wt.started {
		// the header is out and the body began: the stream goes on in
		// this goroutine (a parked stream writes its own header)
		w, stream = headerSent{w}, nil
	} else {
		// which node serves it, under which claim (docs/durable-cluster.md)
		w.Header().Set("AEP-Stream-Node", h.e.NodeID())
		w.Header().Set("AEP-Stream-Epoch", strconv.FormatInt(s.Epoch(), 10))
		w.Header().Set("AEP-Subscription-Id", id)
		transport.StartSSE(w)
	}
	dst := &durableSSE{h: h, id: id, st: &streamState{tenant: tn, mode: ModeAtLeastOnce, state: st}, handed: &handedBatch{s: s}}
	dst.st.frontier = dst.st.fullFrontier(nil)
	dst.run(w, r, s, stream, &fin)
}

// waitingSSE tells the client of a stream whose opening waits for the
// previous holder, at once and every durable.WaitNotice: the first notice
// sends the 200 and the stream headers (AEP-Stream-Node/-Epoch of the new
// claim), then a comment each time, so that a client watchdog sees bytes.
// A refusal after that point can only be an event in the stream.
type waitingSSE struct {
	h       *SubscriptionsHandler
	w       http.ResponseWriter
	id      string
	started bool
}

func (ws *waitingSSE) notice(d durable.DurableWait) {
	if !ws.started {
		ws.w.Header().Set("AEP-Subscription-Id", ws.id)
		ws.w.Header().Set("AEP-Stream-Node", ws.h.e.NodeID())
		ws.w.Header().Set("AEP-Stream-Epoch", strconv.FormatInt(d.Epoch, 10))
		transport.StartSSE(ws.w)
		ws.w.WriteHeader(http.StatusOK)
		ws.started = true
	}
	holder := "node " + d.Node
	if d.Node == "" {
		holder = "node not seen here"
	}
	secs := strconv.FormatFloat(d.Left.Seconds(), 'f', 1, 64)
	ws.write(": waiting for the previous holder of subscription " + ws.id + " (epoch " + strconv.FormatInt(d.Holder, 10) +
		", " + holder + ") to stop: at most " + secs + "s more\n\n")
}

func (ws *waitingSSE) write(b string) {
	rc := http.NewResponseController(ws.w)
	_ = rc.SetWriteDeadline(time.Now().Add(ws.h.cfg.WriteTimeout))
	if _, err := io.WriteString(ws.w, b); err == nil {
		_ = rc.Flush()
	}
}

// refuse ends a stream that waited and then could not open: a
// subscription.expired event {subscription_id, reason "error", error
// {subscription_error, message, retryable true}} (the status was 200).
func (ws *waitingSSE) refuse(tn tenant.Tenant, err error) {
	msg := "a newer stream of subscription " + ws.id + " took it over"
	if !errors.Is(err, durable.ErrTakenOver) {
		ws.h.cfg.Logger.Warn().Err(err).Str("tenant", tn.String()).Str("subscription", ws.id).Msg("dialectd: open stream")
		msg = "the subscription's stream could not be opened; retry"
	}
	ev, nerr := aep.DNotice("subscription.expired", aep.DSubscriptionEnded{SubscriptionID: ws.id, Reason: "error",
		Error: &aep.DError{Code: aep.CodeDSubscriptionError, Message: msg, Retryable: true}}, time.Now())
	if nerr != nil {
		return
	}
	ws.write(string(appendNotice(nil, "subscription.expired", ev)))
}

// headerSent is a response whose header already went out: ServeSSE's
// WriteHeader is then a no-op instead of a superfluous call.
type headerSent struct{ http.ResponseWriter }

func (headerSent) WriteHeader(int) {}

func (h headerSent) Flush() { _ = http.NewResponseController(h.ResponseWriter).Flush() }

func (h headerSent) Unwrap() http.ResponseWriter { return h.ResponseWriter }

type durableSSE struct {
	h      *SubscriptionsHandler
	id     string
	st     *streamState
	handed *handedBatch // the events of the write being prepared
}

func (d *durableSSE) run(w http.ResponseWriter, r *http.Request, s *durable.DurableStream, stream *transport.Stream, fin *transport.Cleanup) {
	cfg := transport.SSEConfig{
		Heartbeat: d.h.cfg.Heartbeat, WriteTimeout: d.h.cfg.WriteTimeout, Batch: d.h.cfg.Batch, Shutdown: d.h.hub.ShuttingDown(),
		Stream: stream, Cleanup: fin,
		OnError: func(err error) {
			d.h.cfg.Logger.Error().Err(err).Str("subscription", d.id).Msg("dialectd: encode message")
		},
		OnShutdown: func(buf []byte) []byte {
			return appendShutdownNotice(buf, d.h.kr, d.st, d.id, "the gateway is shutting down; open the subscription's stream again (on any node) to go on where its acknowledgements left it")
		},
	}
	traced := tracing.On()
	cfg.AfterWrite = func(ok bool) {
		d.handed.written(ok)
		if traced {
			d.st.spans.End(ok)
		}
	}
	onClose := func(buf []byte) []byte {
		if !errors.Is(s.Err(), durable.ErrExpired) {
			return buf
		}
		if ev, err := aep.DNotice("subscription.expired", aep.DSubscriptionEnded{SubscriptionID: d.id, Reason: "expired"}, time.Now()); err == nil {
			buf = appendNotice(buf, "subscription.expired", ev)
		}
		return buf
	}
	// s, not s.Deliveries(): each delivery passes Hand (lease and fence)
	// right before it is encoded into the write
	_ = transport.ServeSSE(w, r, cfg, s, d.appendMessage, onClose) // errors go to OnError
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
func (d *durableSSE) appendMessage(buf []byte, dl durable.DurableDelivery) ([]byte, error) {
	if dl.Kind == durable.DurableDeadLettered {
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
	if buf, err = appendEventSSE(buf, dl.Event, ModeAtLeastOnce, dl.Sequence, cur); err == nil {
		d.handed.add(dl)
	}
	return buf, err
}

// ackItem is one element of an acks batch: an event.acknowledged or
// event.rejected envelope (only type and payload are read).
type ackItem struct {
	Type    string            `json:"type"`
	Payload ackPayload        `json:"payload"`
	rej     durable.Rejection // a rejection's error, once checked
}

// ackPayload is the payload of event.acknowledged / event.rejected as the
// consumer sent it.
type ackPayload struct {
	AcknowledgedEventID string     `json:"acknowledged_event_id"`
	Error               *sentError `json:"error"`
}

// sentError is a rejection's payload.error as sent: pointers tell a member
// left out from one sent empty.
type sentError struct {
	Code      *string `json:"code"`
	Message   *string `json:"message"`
	Retryable *bool   `json:"retryable"`
}

// checkAck says why an ack's or rejection's payload is refused ("" when it
// is not) and, for a rejection, the rejection it carries. error-model.md:
// an error payload must include code, message and retryable, so a
// rejection without them is refused rather than guessed at; retryable
// decides what the rejection does (redeliver, or dead-letter at once).
func checkAck(p ackPayload, reject bool) (durable.Rejection, string) {
	switch {
	case p.AcknowledgedEventID == "":
		return durable.Rejection{}, "payload.acknowledged_event_id is required"
	case len(p.AcknowledgedEventID) > MaxAckIDBytes:
		return durable.Rejection{}, "payload.acknowledged_event_id is longer than " + strconv.Itoa(MaxAckIDBytes) + " bytes"
	case !reject:
		return durable.Rejection{}, ""
	}
	e := p.Error
	if e == nil || e.Code == nil || *e.Code == "" || e.Message == nil || e.Retryable == nil {
		return durable.Rejection{}, "event.rejected needs payload.error with code, message and retryable (error-model.md)"
	}
	if len(*e.Code) > MaxRejectCodeBytes || len(*e.Message) > MaxRejectMessageBytes {
		return durable.Rejection{}, "payload.error.code is limited to " + strconv.Itoa(MaxRejectCodeBytes) + " bytes and payload.error.message to " + strconv.Itoa(MaxRejectMessageBytes)
	}
	return durable.Rejection{Code: *e.Code, Message: *e.Message, Retryable: *e.Retryable}, ""
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
		if it.Type != "event.acknowledged" && it.Type != "event.rejected" {
			res[i] = ackResult{Result: "invalid", Error: &aep.DError{Code: aep.CodeDInvalidEventType, Message: "type must be event.acknowledged or event.rejected"}}
			it.Type = ""
			continue
		}
		rej, msg := checkAck(it.Payload, it.Type == "event.rejected")
		if msg != "" {
			id := it.Payload.AcknowledgedEventID
			if len(id) > MaxAckIDBytes {
				id = ""
			}
			res[i] = ackResult{AcknowledgedEventID: id, Result: "invalid", Error: &aep.DError{Code: aep.CodeDInvalidEnvelope, Message: msg}}
			it.Type = ""
			continue
		}
		it.rej = rej
	}
	return items, res, nil
}

// refuseOpen answers a stream that could not be opened before its wait
// began: 409 when a newer stream took the subscription over meanwhile,
// 503 otherwise.
func (h *SubscriptionsHandler) refuseOpen(w http.ResponseWriter, tn tenant.Tenant, id string, err error) {
	det := map[string]string{"subscription_id": id}
	switch {
	case errors.Is(err, durable.ErrTakenOver):
		writeErr(w, http.StatusConflict, aep.CodeDSubscriptionError, "a newer stream of subscription "+id+" took it over", true, det)
	default:
		h.unavailable(w, tn, "open stream", err)
	}
}

// acks serves POST /aep/subscriptions/{id}/acks on any node: the acks and
// rejections are written to the tenant's subscription journal (acks=all)
// before the answer, so none is lost whichever node fails next; the
// stream's holder applies them. A stream open on this node applies them at
// them at once and answers their outcome; otherwise the result is
// "recorded". A 503 (the journal did not take them) is to be retried.
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
	if _, ok := h.lookup(w, r, id); !ok {
		return
	}
	tn := requestTenant(r)
	var acked, rejIDs []string
	var rejs []durable.Rejection
	for _, it := range items {
		switch it.Type {
		case "event.acknowledged":
			acked = append(acked, it.Payload.AcknowledgedEventID)
		case "event.rejected":
			rejIDs, rejs = append(rejIDs, it.Payload.AcknowledgedEventID), append(rejs, it.rej)
		}
	}
	// a stream open here applies them first (its outcome is the answer;
	// the copy it then reads from the journal is a harmless duplicate)
	s := h.activeStream(tn, id)
	for i, it := range items {
		if it.Type == "" {
			continue
		}
		res[i].AcknowledgedEventID = it.Payload.AcknowledgedEventID
		res[i].Result = applyAck(s, it)
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.SetupTimeout)
	defer cancel()
	if err := h.e.JournalAcks(ctx, tn, id, acked, rejs, rejIDs); err != nil {
		h.unavailable(w, tn, "journal acks", err)
		return
	}
	transport.WriteJSON(w, http.StatusOK, struct {
		Results []ackResult `json:"results"`
	}{res})
}

// applyAck applies a journaled ack or rejection to the stream open on this
// node (nil: none) and words the result: "recorded" when no stream here
// took it (the holder, wherever it is, applies it from the journal).
func applyAck(s *durable.DurableStream, it ackItem) string {
	out := durable.OutcomeClosed
	if s != nil {
		if it.Type == "event.acknowledged" {
			out = s.Ack(it.Payload.AcknowledgedEventID)
		} else {
			out = s.Reject(it.Payload.AcknowledgedEventID, it.rej)
		}
	}
	if out == durable.OutcomeClosed {
		return ResultRecorded
	}
	return string(out)
}

// ResultRecorded answers an ack or rejection that is durable in the
// journal and applied by the stream's holder on another node (or by the
// next stream).
const ResultRecorded = "recorded"
