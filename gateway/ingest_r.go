package gateway

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// rPosition is where an accepted event landed in the log.
type rPosition struct {
	Index     int   `json:"index"`
	Line      int   `json:"line"`
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
	// Reused is set when the broker may have handed this offset out before
	// (docs/record-format.md, "offset resets").
	Reused bool `json:"reused_offset,omitempty"`
	// InLog, on a failed event, says whether it may be in the log
	// ("unknown": Kafka did not answer in time; retry with the same id) or
	// certainly is not ("no").
	InLog string `json:"in_log,omitempty"`
}

type rAccepted struct {
	Accepted  int         `json:"accepted"`
	Topic     string      `json:"topic"`
	Positions []rPosition `json:"positions"`
	// Diagnostics name what a CloudEvents request lost in the mapping
	// (extension attributes whose names AEP cannot carry).
	Diagnostics []string `json:"diagnostics,omitempty"`
}

type rUnavailable struct {
	rError
	Accepted  int         `json:"accepted"`
	Failed    []rPosition `json:"failed"`
	Positions []rPosition `json:"positions"`
}

// handleIngestR serves POST /events (AEP-0003 §3.2): a single event as
// application/json or a batch as application/x-ndjson. The batch is
// all-or-nothing at validation: one invalid event rejects the request with
// the first failing line and nothing is written. A batch that validated but
// that Kafka only partly took gets 503 listing the events that landed and
// the ones that did not (retry those with the same ids).
func (s *Server) handleIngestR(w http.ResponseWriter, r *http.Request) {
	const d = aep.DialectR
	mt, err := mediaType(r)
	ce := ceModeOf(mt, r)
	// A CloudEvent carries its AEP version as aepversion: the header is
	// for AEP's own framings.
	if v := r.Header.Get(aep.HeaderAEPVersion); !aep.AcceptVersionHeader(v) && (ce == ceNone || v != "") {
		s.metrics.rejected(d, "version", 1)
		writeJSON(w, http.StatusUpgradeRequired, map[string][]string{"versions": aep.SupportedVersions(d)})
		return
	}
	if err != nil || (mt != "application/json" && mt != "application/x-ndjson" && ce == ceNone) {
		if err == nil {
			err = fmt.Errorf("Content-Type %s is not accepted: use application/json for one event, application/x-ndjson for a batch, or a CloudEvents HTTP binding (application/cloudevents+json, application/cloudevents-batch+json, or binary mode)", mt)
		}
		s.metrics.rejected(d, "media-type", 1)
		writeR(w, http.StatusUnsupportedMediaType, aep.CodeRInvalidEvent, err.Error())
		return
	}
	lim := s.ingest.limits
	bufs := getReqBufs()
	defer bufs.release() // after the answer is written
	body, tooLarge, err := bufs.readBody(w, r, lim.MaxBodyBytes)
	if s.refuseBody(w, d, err) {
		return
	}
	if err != nil {
		status := http.StatusBadRequest
		code := aep.CodeRInvalidEvent
		if tooLarge {
			status, code = http.StatusRequestEntityTooLarge, aep.CodeRLimitExceeded
		}
		s.metrics.rejected(d, "body", 1)
		writeR(w, status, code, err.Error())
		return
	}
	var frames []frame
	switch {
	case ce == ceBinary:
		var one []byte
		if one, err = binaryCloudEvent(r, body); err != nil {
			s.metrics.rejected(d, "cloudevents", 1)
			writeR(w, http.StatusBadRequest, aep.CodeRInvalidEvent, "binary-mode CloudEvent: "+err.Error())
			return
		}
		frames, err = splitJSON(one, false, lim.MaxEventBytes, 1, bufs.frames[:0])
	case ce == ceBatch:
		frames, err = splitJSON(body, true, lim.MaxEventBytes, lim.MaxBatchEvents, bufs.frames[:0])
	case mt == "application/x-ndjson":
		frames, err = splitNDJSON(body, lim.MaxEventBytes, lim.MaxBatchEvents, bufs.frames[:0])
	default:
		frames, err = splitJSON(body, false, lim.MaxEventBytes, 1, bufs.frames[:0])
	}
	if err != nil {
		s.writeFramingR(w, err)
		return
	}
	var diags []string
	if ce != ceNone {
		var bad *frame
		if diags, bad, err = mapCloudEvents(frames); err != nil {
			s.writeCloudEventError(w, bad, err)
			return
		}
	}
	s.metrics.batchSize.WithLabelValues(d.String()).Observe(float64(len(frames)))
	if !s.admit(w, r, d, len(frames)) {
		return
	}

	bufs.frames = frames
	outs, ok := s.ingest.validate(d, frames, bufs.outs)
	bufs.outs = outs
	if !ok {
		s.writeInvalidR(w, outs)
		return
	}
	t, _ := tenant.FromContext(r.Context())
	if checkPublisher(d, t, s.verifyToken(), outs) > 0 {
		// AEP-0003's batch rule: one event refused refuses the batch,
		// nothing is written. 403: the credential is valid, the act not.
		s.writeUnauthorizedR(w, outs)
		return
	}
	writeErr := s.ingest.write(r.Context(), t.String(), publisherOf(t, viaHTTP), d, outs, true, &bufs.recBufs)
	resp := rUnavailable{Positions: make([]rPosition, 0, len(outs))}
	for i := range outs {
		o := &outs[i]
		p := rPosition{Index: o.index, Line: o.line, Partition: o.partition, Offset: o.offset, Reused: o.reused}
		if o.writeErr != nil {
			p.Partition, p.Offset, p.InLog = -1, -1, inLog(o.writeErr)
			resp.Failed = append(resp.Failed, p)
			continue
		}
		resp.Accepted++
		resp.Positions = append(resp.Positions, p)
	}
	s.metrics.accepted(d, resp.Accepted)
	if writeErr == nil {
		writeAppended(w, http.StatusAccepted, &rAccepted{Accepted: resp.Accepted, Topic: s.topicName(r), Positions: resp.Positions, Diagnostics: diags})
		return
	}
	s.rejectedWrite(d, TenantFrom(r.Context()), writeErr, len(resp.Failed))
	resp.rError = rError{Error: "unavailable", Detail: "the event log did not take every event: " + writeErr.Error() + "; retry the failed events with the same ids"}
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusServiceUnavailable, resp)
}

func (s *Server) writeFramingR(w http.ResponseWriter, err error) {
	const d = aep.DialectR
	var fe *framingError
	switch {
	case errors.Is(err, errEmptyBody):
		s.metrics.rejected(d, "empty", 1)
		writeR(w, http.StatusBadRequest, aep.CodeRInvalidEvent, err.Error())
	case errors.As(err, &fe) && fe.tooMany:
		s.metrics.rejected(d, "limit", 1)
		idx := fe.index
		writeJSON(w, http.StatusRequestEntityTooLarge, rError{Error: aep.CodeRLimitExceeded, Detail: fe.msg, Line: fe.line, Index: &idx})
	case errors.As(err, &fe):
		s.metrics.rejected(d, "syntax", 1)
		idx := fe.index
		writeJSON(w, http.StatusBadRequest, rError{Error: aep.CodeRInvalidEvent, Detail: fe.msg, Line: fe.line, Index: &idx})
	default:
		s.metrics.rejected(d, "syntax", 1)
		writeR(w, http.StatusBadRequest, aep.CodeRInvalidEvent, err.Error())
	}
}

// writeInvalidR rejects a batch whole, naming its first invalid event.
func (s *Server) writeInvalidR(w http.ResponseWriter, outs []outcome) { s.writeRefusedR(w, outs, 0) }

// writeUnauthorizedR refuses a batch with an event its credential's
// principal may not publish: 403 (AEP-0003 §8: a valid token, an act it
// does not allow), naming the first such event.
func (s *Server) writeUnauthorizedR(w http.ResponseWriter, outs []outcome) {
	s.writeRefusedR(w, outs, http.StatusForbidden)
}

// writeRefusedR answers a batch refused for its first refused event, with
// status, or that event's error's status when 0.
func (s *Server) writeRefusedR(w http.ResponseWriter, outs []outcome, status int) {
	var first *outcome
	invalid := 0
	for i := range outs {
		if e := outs[i].parseErr; e != nil {
			invalid++
			s.metrics.rejected(aep.DialectR, e.Kind.String(), 1)
			if first == nil {
				first = &outs[i]
			}
		}
	}
	e := first.parseErr
	idx := first.index
	body := rError{Error: e.Code, Detail: fmt.Sprintf("line %d: %s", first.line, e.Message), Field: e.Field, Line: first.line, Index: &idx}
	if invalid > 1 {
		body.Invalid = invalid
	}
	if status == 0 {
		status = e.HTTPStatus()
	}
	writeJSON(w, status, body)
}
