package aep

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// OTLP and OCSF projections of dialect R events (AEP-0005 §3-4): pure
// mappings, tested against the spec's pinned records
// (aep/testdata/r-otlp-expected.json, r-ocsf-*.json). Values of the event
// pass through verbatim (json.RawMessage). Above the ceiling (maxCapture)
// an event's payload is dropped wholesale before projection: always a legal
// down-level (AEP-0001 §8.2(b)), and the one the pinned records show.

// OTLPLogRecord is an event as an OTLP LogRecord (AEP-0005 §3.2), in the
// JSON encoding of the OTLP data model the pins use.
type OTLPLogRecord struct {
	TimeUnixNano   int64                      `json:"time_unix_nano"`
	EventName      string                     `json:"event_name"`
	SeverityText   string                     `json:"severity_text"`
	SeverityNumber int                        `json:"severity_number"`
	Resource       map[string]json.RawMessage `json:"resource"`
	Attributes     map[string]json.RawMessage `json:"attributes"`
	TraceID        string                     `json:"trace_id,omitempty"`
	SpanID         string                     `json:"span_id,omitempty"`
	Flags          *int                       `json:"flags,omitempty"`
	Body           map[string]json.RawMessage `json:"body,omitempty"`
}

// otlpSeverity is AEP-0005 §3.4.
var otlpSeverity = map[string]struct {
	text string
	num  int
}{"debug": {"DEBUG", 5}, "info": {"INFO", 9}, "notice": {"INFO2", 10}, "warning": {"WARN", 13}, "error": {"ERROR", 17}, "critical": {"FATAL", 21}}

// ocsfSeverity is AEP-0005 §4.4.
var ocsfSeverity = map[string]int{"debug": 1, "info": 1, "notice": 2, "warning": 3, "error": 4, "critical": 5}

// rEvent is a dialect R event's members, raw.
type rEvent struct {
	m       map[string]json.RawMessage
	str     map[string]string // the string-valued members, decoded
	capture Capture
	data    map[string]json.RawMessage // nil when none survives the ceiling
	dataRaw json.RawMessage
}

func parseREvent(raw []byte, maxCapture Capture) (*rEvent, error) {
	// One pass of the package's scanner: member values stay windows of raw
	// (encoding/json's map decode was half of an OTLP projection's CPU).
	var p parser
	p.init(raw, Limits{})
	if f := p.scanTop(); f != nil {
		return nil, fmt.Errorf("aep: projection: %w", f.toError(DialectR))
	}
	e := &rEvent{m: make(map[string]json.RawMessage, p.n), str: make(map[string]string, p.n)}
	for i := 0; i < p.n; i++ {
		m := p.mem(i)
		name := string(m.name)
		e.m[name] = m.raw(raw)
		if m.kind == vString {
			e.str[name] = string(p.str(m))
		}
	}
	for _, k := range []string{"id", "type", "time", "source", "agent"} {
		if e.str[k] == "" {
			return nil, fmt.Errorf("aep: projection: the event has no %s", k)
		}
	}
	e.capture = CaptureMetadata
	if s, ok := e.str["capture"]; ok {
		c, ok := ParseCapture(s)
		if !ok {
			return nil, fmt.Errorf("aep: projection: capture %q", s)
		}
		e.capture = c
	}
	if d, ok := e.m["data"]; ok && e.capture <= maxCapture {
		if err := json.Unmarshal(d, &e.data); err != nil {
			return nil, fmt.Errorf("aep: projection: data: %w", err)
		}
		e.dataRaw = d
	}
	return e, nil
}

// OCSFMaps says whether ToOCSF projects events of type typ (AEP-0005
// §4.2): a bridge skips the others without parsing them.
func OCSFMaps(typ string) bool {
	_, ok := ocsfClasses[typ]
	return ok
}

func (e *rEvent) severity() string {
	if s, ok := e.str["severity"]; ok {
		return s
	}
	return "info"
}

func (e *rEvent) unixNano() (int64, error) {
	t, err := time.Parse(time.RFC3339Nano, e.str["time"])
	if err != nil {
		return 0, fmt.Errorf("aep: projection: time: %w", err)
	}
	return t.UnixNano(), nil
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// ToOTLPLog projects an event (valid dialect R) as an OTLP LogRecord:
// AEP-0005 §3.2's field table, §3.4's severities (info when absent), data
// members named gen_ai.* hoisted to attributes and the rest as body, the
// payload dropped above maxCapture (§3.3).
func ToOTLPLog(raw []byte, maxCapture Capture) (*OTLPLogRecord, error) {
	e, err := parseREvent(raw, maxCapture)
	if err != nil {
		return nil, err
	}
	sev, ok := otlpSeverity[e.severity()]
	if !ok {
		return nil, fmt.Errorf("aep: projection: severity %q", e.severity())
	}
	ns, err := e.unixNano()
	if err != nil {
		return nil, err
	}
	r := &OTLPLogRecord{TimeUnixNano: ns, EventName: CETypeRoot + e.str["type"], SeverityText: sev.text, SeverityNumber: sev.num,
		Resource: map[string]json.RawMessage{"service.name": e.m["agent"]},
		Attributes: map[string]json.RawMessage{"aep.agent_id": e.m["agent"], "aep.event_id": e.m["id"],
			"aep.capture": jsonString(e.capture.String()), "aep.source": e.m["source"]}}
	for _, a := range [][2]string{{"session", "aep.session_id"}, {"run", "aep.run_id"}, {"step", "aep.step"}, {"seq", "aep.sequence"},
		{"epoch", "aep.epoch"}, {"cause", "aep.causation_id"}, {"subject", "aep.subject"}} {
		if v, ok := e.m[a[0]]; ok {
			r.Attributes[a[1]] = v
		}
	}
	if tp, ok := e.str["traceparent"]; ok {
		parts := strings.Split(tp, "-")
		if len(parts) != 4 {
			return nil, errors.New("aep: projection: traceparent is not version-traceid-spanid-flags")
		}
		flags, err := strconv.ParseUint(parts[3], 16, 8)
		if err != nil {
			return nil, fmt.Errorf("aep: projection: traceparent flags: %w", err)
		}
		f := int(flags)
		r.TraceID, r.SpanID, r.Flags = parts[1], parts[2], &f
	}
	for k, v := range e.data {
		if strings.HasPrefix(k, "gen_ai.") {
			r.Attributes[k] = v
			continue
		}
		if r.Body == nil {
			r.Body = map[string]json.RawMessage{}
		}
		r.Body[k] = v
	}
	return r, nil
}

// ocsfClass is one row of AEP-0005 §4.2.
type ocsfClass struct {
	class, category, activity int
	status, disposition       int // 0: none
}

var ocsfClasses = map[string]ocsfClass{
	"session.started":     {3002, 3, 1, 1, 0},
	"session.ended":       {3002, 3, 2, 1, 0},
	"tool.requested":      {1007, 1, 1, 0, 0},
	"tool.completed":      {1007, 1, 2, 1, 0},
	"tool.failed":         {1007, 1, 2, 2, 0},
	"tool.denied":         {1007, 1, 1, 2, 2},
	"attention.requested": {2004, 2, 1, 1, 0},
	"attention.answered":  {2004, 2, 2, 2, 0},
	"attention.resolved":  {2004, 2, 3, 4, 0}, // 16 No Action when dismissed (§4.5)
	"attention.timeout":   {2004, 2, 3, 0, 16},
}

// OCSFVersion is the OCSF version the projection targets (AEP-0005 §4.1).
const OCSFVersion = "1.8.0"

// uriAuthority is a URI's authority, for device.hostname.
var uriAuthority = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]+)`)

// ToOCSF projects an event of the security-relevant families onto its
// OCSF class (AEP-0005 §4): nil, nil for any other type. The record is
// JSON-ready; unmapped.aep carries the whole envelope and unmapped.data
// the payload that survives maxCapture.
func ToOCSF(raw []byte, maxCapture Capture) (map[string]any, error) {
	e, err := parseREvent(raw, maxCapture)
	if err != nil {
		return nil, err
	}
	typ := e.str["type"]
	c, ok := ocsfClasses[typ]
	if !ok {
		return nil, nil
	}
	sev, ok := ocsfSeverity[e.severity()]
	if !ok {
		return nil, fmt.Errorf("aep: projection: severity %q", e.severity())
	}
	ns, err := e.unixNano()
	if err != nil {
		return nil, err
	}
	envelope := map[string]json.RawMessage{}
	for k, v := range e.m {
		if k != "data" {
			envelope[k] = v
		}
	}
	meta := map[string]any{"version": OCSFVersion, "uid": e.m["id"], "original_time": e.m["time"],
		"product": map[string]any{"name": e.m["agent"]}}
	if v, ok := e.m["cause"]; ok {
		meta["correlation_uid"] = v
	}
	unmapped := map[string]any{"aep": envelope}
	if len(e.data) > 0 {
		unmapped["data"] = e.dataRaw
	}
	rec := map[string]any{"class_uid": c.class, "category_uid": c.category, "activity_id": c.activity,
		"type_uid": c.class*100 + c.activity, "time": ns / int64(time.Millisecond), "severity_id": sev,
		"message": typ, "metadata": meta, "unmapped": unmapped}
	if c.status != 0 {
		rec["status_id"] = c.status
	}
	disposition := c.disposition
	switch c.class {
	case 3002:
		rec["user"] = map[string]any{"name": e.m["agent"]}
		rec["session"] = map[string]any{"uid": e.m["session"]}
	case 1007:
		rec["actor"] = map[string]any{"app_name": e.m["agent"]}
		device := map[string]any{"type_id": 0}
		if m := uriAuthority.FindStringSubmatch(e.str["source"]); m != nil {
			device["hostname"] = m[1]
		} else {
			device["name"] = e.m["source"]
		}
		rec["device"] = device
		proc := map[string]any{"name": e.m["subject"]}
		var tool struct {
			CallID string `json:"call_id"`
		}
		if t, ok := e.data["tool"]; ok && json.Unmarshal(t, &tool) == nil && tool.CallID != "" {
			proc["uid"] = tool.CallID
		}
		rec["process"] = proc
	case 2004:
		uid := e.m["subject"]
		if typ == "attention.requested" {
			uid = e.m["id"]
		}
		rec["finding_info"] = map[string]any{"uid": uid, "title": typ}
		var res struct {
			Resolution string `json:"resolution"`
		}
		if typ == "attention.resolved" && json.Unmarshal(e.dataRaw, &res) == nil && res.Resolution == "dismissed" {
			disposition = 16 // §4.5: answered asserts no disposition
		}
	}
	if disposition != 0 {
		rec["disposition_id"] = disposition
		meta["profiles"] = []string{"security_control"}
	}
	return rec, nil
}
