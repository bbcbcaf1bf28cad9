package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/aep-gateway/aep-gateway/aep"
)

// CloudEvents in (AEP-0005 §2, docs/dialects.md "CloudEvents"): POST /events
// takes AEP CloudEvents in the CloudEvents HTTP binding, mapped to dialect
// R events by the inverse rules before the usual validation, and stored as
// those events.
const (
	mediaCE      = "application/cloudevents+json"       // structured mode, one event
	mediaCEBatch = "application/cloudevents-batch+json" // structured, a JSON array
)

// ceMode is how a request carries CloudEvents: none, structured (one or a
// batch), or binary (attributes in ce-* headers, the data the body).
type ceMode int

const (
	ceNone ceMode = iota
	ceStructured
	ceBatch
	ceBinary
)

func ceModeOf(mt string, r *http.Request) ceMode {
	switch {
	case mt == mediaCE:
		return ceStructured
	case mt == mediaCEBatch:
		return ceBatch
	case mt == "application/json" && r.Header.Get("Ce-Specversion") != "":
		return ceBinary
	}
	return ceNone
}

// ceIntAttrs are the CloudEvents attributes whose AEP values are integers:
// in binary mode a header carries them as text.
var ceIntAttrs = map[string]bool{"aepsequence": true, "aepepoch": true}

// binaryCloudEvent assembles the structured form of a binary-mode
// CloudEvent: its ce-* headers (names lowercased, integers where AEP has
// them) and the body as data.
func binaryCloudEvent(r *http.Request, body []byte) ([]byte, error) {
	m := map[string]json.RawMessage{}
	for k, vs := range r.Header {
		name, ok := strings.CutPrefix(strings.ToLower(k), "ce-")
		if !ok || len(vs) == 0 {
			continue
		}
		if len(vs) > 1 {
			return nil, fmt.Errorf("header %s given %d times", k, len(vs))
		}
		if ceIntAttrs[name] {
			n, err := strconv.ParseInt(vs[0], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("header %s: %q is not an integer", k, vs[0])
			}
			m[name] = json.RawMessage(strconv.FormatInt(n, 10))
			continue
		}
		v, _ := json.Marshal(vs[0])
		m[name] = v
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if !json.Valid(body) {
			return nil, errors.New("the body (the event's data) is not JSON")
		}
		m["data"] = body
		m["datacontenttype"] = json.RawMessage(`"application/json"`)
	}
	return json.Marshal(m)
}

// mapCloudEvents replaces each frame's CloudEvent by its dialect R event.
// It returns diagnostics for extension attributes dropped, or the first
// frame that does not map.
func mapCloudEvents(frames []frame) (diags []string, bad *frame, err error) {
	for i := range frames {
		f := &frames[i]
		if f.oversize {
			continue // refused by validation, as any event over the limit
		}
		raw, dropped, err := aep.FromCloudEvent(f.raw)
		if err != nil {
			return nil, f, err
		}
		for _, d := range dropped {
			diags = append(diags, fmt.Sprintf("event %d: CloudEvents attribute %q dropped: not a legal AEP extension attribute name (AEP-0001 §5.4)", f.index, d))
		}
		f.raw, f.size = raw, len(raw)
	}
	return diags, nil, nil
}

// writeCloudEventError refuses a request whose CloudEvent at f does not
// map.
func (s *Server) writeCloudEventError(w http.ResponseWriter, f *frame, err error) {
	s.metrics.rejected(aep.DialectR, "cloudevents", 1)
	idx := f.index
	detail := fmt.Sprintf("event %d: %v", f.index, err)
	if errors.Is(err, aep.ErrForeignCloudEvent) {
		detail += "; only CloudEvents of AEP types (dev.aep.*) are AEP events (AEP-0005 §2 rule 3)"
	}
	writeJSON(w, http.StatusBadRequest, rError{Error: aep.CodeRInvalidEvent, Detail: detail, Line: f.line, Index: &idx})
}
