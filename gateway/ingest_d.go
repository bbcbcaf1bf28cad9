package gateway

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

type dEventError struct {
	EventIndex int       `json:"event_index"`
	Error      dErrorObj `json:"error"`
}

type dPosition struct {
	EventIndex int    `json:"event_index"`
	ID         string `json:"id"`
	Partition  int32  `json:"partition"`
	Offset     int64  `json:"offset"`
	Reused     bool   `json:"reused_offset,omitempty"`
}

// dIngestResponse is transport-sse.md's ingest summary, with the log
// position of every accepted event added.
type dIngestResponse struct {
	Accepted  int           `json:"accepted"`
	Rejected  int           `json:"rejected"`
	Errors    []dEventError `json:"errors"`
	Topic     string        `json:"topic,omitempty"`
	Positions []dPosition   `json:"positions"`
}

// handleIngestD serves POST /aep/events (transport-sse.md, Ingest Endpoint):
// NDJSON, or for convenience application/json holding one event or an array
// of events. A body with any line that is not JSON is refused whole (400,
// naming those lines). Otherwise each event stands alone: valid events are
// written, invalid ones are listed in errors with D's codes, and the 202
// says which is which. An
// event Kafka did not take is listed with a retryable internal_error. When
// no event at all was accepted because of the log, the status is 503.
func (s *Server) handleIngestD(w http.ResponseWriter, r *http.Request) {
	const d = aep.DialectD
	mt, err := mediaType(r)
	if err != nil || (mt != "application/json" && mt != "application/x-ndjson") {
		if err == nil {
			err = fmt.Errorf("Content-Type %s is not accepted: use application/x-ndjson, or application/json for one event or an array", mt)
		}
		s.metrics.rejected(d, "media-type", 1)
		writeD(w, http.StatusUnsupportedMediaType, aep.CodeDProtocolError, err.Error(), false)
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
		if tooLarge {
			status = http.StatusRequestEntityTooLarge
		}
		s.metrics.rejected(d, "body", 1)
		writeD(w, status, aep.CodeDProtocolError, err.Error(), false)
		return
	}
	var frames []frame
	if mt == "application/x-ndjson" {
		frames, err = splitNDJSON(body, lim.MaxEventBytes, lim.MaxBatchEvents, bufs.frames[:0])
	} else {
		frames, err = splitJSON(body, true, lim.MaxEventBytes, lim.MaxBatchEvents, bufs.frames[:0])
	}
	if err != nil {
		var fe *framingError
		status := http.StatusBadRequest
		code := aep.CodeDInvalidEnvelope
		if errors.As(err, &fe) && fe.tooMany {
			status, code = http.StatusRequestEntityTooLarge, aep.CodeDProtocolError
		}
		s.metrics.rejected(d, "framing", 1)
		writeD(w, status, code, err.Error(), false)
		return
	}
	s.metrics.batchSize.WithLabelValues(d.String()).Observe(float64(len(frames)))
	if !s.admit(w, r, d, len(frames)) {
		return
	}

	bufs.frames = frames
	outs, _ := s.ingest.validate(d, frames, bufs.outs)
	t, _ := tenant.FromContext(r.Context())
	checkPublisher(d, t, s.verifyToken(), outs)
	bufs.outs = outs
	resp := dIngestResponse{Errors: []dEventError{}, Positions: make([]dPosition, 0, len(outs))}
	valid := 0
	for i := range outs {
		if outs[i].parseErr == nil {
			valid++
		}
	}
	if anySyntax(outs) {
		// transport-sse.md answers invalid JSON in the body with 400; the
		// whole request is refused, nothing is written, and every line
		// that is not JSON is named (docs/dialects.md).
		for i := range outs {
			if e := outs[i].parseErr; e != nil && e.Kind == aep.KindSyntax {
				resp.Errors = append(resp.Errors, dEventError{EventIndex: outs[i].index, Error: dErrorFrom(e)})
			}
		}
		s.metrics.rejected(d, aep.KindSyntax.String(), len(outs))
		resp.Rejected = len(outs)
		writeJSON(w, http.StatusBadRequest, resp)
		return
	}
	var writeErr error
	if valid > 0 {
		writeErr = s.ingest.write(r.Context(), t.String(), publisherOf(t, viaHTTP), d, outs, true, &bufs.recBufs)
	}
	for i := range outs {
		o := &outs[i]
		switch {
		case o.parseErr != nil:
			s.metrics.rejected(d, o.parseErr.Kind.String(), 1)
			resp.Errors = append(resp.Errors, dEventError{EventIndex: o.index, Error: dErrorFrom(o.parseErr)})
		case o.writeErr != nil:
			resp.Errors = append(resp.Errors, dEventError{EventIndex: o.index, Error: dErrorObj{
				Code: aep.CodeDInternalError, Message: "the event log did not take this event: " + o.writeErr.Error(), Retryable: true,
				Details: map[string]any{"in_log": inLog(o.writeErr)}}})
		default:
			resp.Accepted++
			resp.Positions = append(resp.Positions, dPosition{EventIndex: o.index, ID: o.attrs.ID, Partition: o.partition, Offset: o.offset, Reused: o.reused})
		}
	}
	resp.Rejected = len(outs) - resp.Accepted
	s.metrics.accepted(d, resp.Accepted)
	if resp.Accepted > 0 {
		resp.Topic = s.topicName(r)
	}
	status := http.StatusAccepted
	if writeErr != nil {
		s.rejectedWrite(d, TenantFrom(r.Context()), writeErr, valid-resp.Accepted)
		if resp.Accepted == 0 {
			status = http.StatusServiceUnavailable
			w.Header().Set("Retry-After", "1")
		}
	}
	writeDIngest(w, status, &resp)
}

func anySyntax(outs []outcome) bool {
	for i := range outs {
		if outs[i].parseErr != nil && outs[i].parseErr.Kind == aep.KindSyntax {
			return true
		}
	}
	return false
}
