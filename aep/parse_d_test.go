package aep

import (
	"path/filepath"
	"strings"
	"testing"
)

// Every event of D's conformance fixtures (all seven files of axisrobo/aep
// conformance/fixtures at 08ad33e, see testdata/README.md) is accepted,
// including those that carry a delivery object, as events relayed from an
// upstream AEP hop do.
func TestFixturesD(t *testing.T) {
	files, err := filepath.Glob("testdata/d-*.ndjson")
	if err != nil || len(files) != 7 {
		t.Fatalf("fixtures: %v %v", files, err)
	}
	n, withDelivery := 0, 0
	for _, f := range files {
		for i, line := range readLines(t, f) {
			n++
			if strings.Contains(string(line), `"delivery":`) {
				withDelivery++
			}
			a, err := ParseAs(DialectD, line, Limits{})
			if err != nil {
				t.Errorf("%s[%d]: %v", f, i, err)
				continue
			}
			ref, _ := refAttrs(line)
			if !attrsEqual(a, ref) {
				t.Errorf("%s[%d]:\n got %+v\nwant %+v", f, i, a, ref)
			}
		}
	}
	if n != 41 || withDelivery != 11 {
		t.Errorf("%d fixture events, %d with delivery; want 41 and 11", n, withDelivery)
	}
}

const baseD = `"aep_version":"0.1","id":"evt_1","type":"task.progress","source":"agent:researcher","created_at":"2026-07-09T10:00:00Z","payload":{}`

func TestRulesD(t *testing.T) {
	tests := []struct {
		name  string
		event string
		field string // "" with code "" = accepted
		code  string
	}{
		{"minimal", `{` + baseD + `}`, "", ""},
		{"routing members", `{` + baseD + `,"session_id":"s","conversation_id":"c","task_id":"t","target":"agent:x","topic":"tasks.t1"}`, "", ""},
		{"empty optional string", `{` + baseD + `,"target":""}`, "", ""},
		{"payload null", `{"aep_version":"0.1","id":"e","type":"a.b","source":"s","created_at":"2026-07-09T10:00:00Z","payload":null}`, "", ""},
		{"payload scalar", `{"aep_version":"0.1","id":"e","type":"a.b","source":"s","created_at":"2026-07-09T10:00:00Z","payload":3}`, "", ""},
		{"unknown members ignored", `{` + baseD + `,"authorization":{"scheme":"bearer","token":"t"},"x":null,"seq":"what"}`, "", ""},
		{"missing id", `{"aep_version":"0.1","type":"a.b","source":"s","created_at":"2026-07-09T10:00:00Z","payload":{}}`, "id", CodeDInvalidEnvelope},
		{"missing payload", `{"aep_version":"0.1","id":"e","type":"a.b","source":"s","created_at":"2026-07-09T10:00:00Z"}`, "payload", CodeDInvalidEnvelope},
		{"missing created_at", `{"aep_version":"0.1","id":"e","type":"a.b","source":"s","payload":{}}`, "created_at", CodeDInvalidEnvelope},
		{"empty source", `{` + strings.Replace(baseD, `"agent:researcher"`, `""`, 1) + `}`, "source", CodeDInvalidEnvelope},
		{"type one segment", `{` + strings.Replace(baseD, `task.progress`, `task`, 1) + `}`, "type", CodeDInvalidEventType},
		{"type underscore first segment", `{` + strings.Replace(baseD, `task.progress`, `my_task.progress`, 1) + `}`, "type", CodeDInvalidEventType},
		{"type underscore later", `{` + strings.Replace(baseD, `task.progress`, `task.in_progress`, 1) + `}`, "", ""},
		{"type digit start", `{` + strings.Replace(baseD, `task.progress`, `task.1x`, 1) + `}`, "type", CodeDInvalidEventType},
		{"type unregistered", `{` + strings.Replace(baseD, `task.progress`, `custom.foo`, 1) + `}`, "", ""},
		{"type inner wildcard-ish", `{` + strings.Replace(baseD, `task.progress`, `tool.call.progress`, 1) + `}`, "", ""},
		{"created_at not a date", `{` + strings.Replace(baseD, `2026-07-09T10:00:00Z`, `yesterday`, 1) + `}`, "created_at", CodeDInvalidEnvelope},
		{"expires_at null", `{` + baseD + `,"expires_at":null}`, "", ""},
		{"expires_at bad", `{` + baseD + `,"expires_at":"2026-13-01T00:00:00Z"}`, "expires_at", CodeDInvalidEnvelope},
		{"target null", `{` + baseD + `,"target":null}`, "target", CodeDInvalidEnvelope},
		{"session_id number", `{` + baseD + `,"session_id":7}`, "session_id", CodeDInvalidEnvelope},
		{"delivery", `{` + baseD + `,"delivery":{"mode":"best_effort","sequence":1}}`, "", ""},
		{"delivery full", `{` + baseD + `,"delivery":{"mode":"replayable","sequence":0,"cursor":"stream_01:1","hop":{"x":[1]}}}`, "", ""},
		{"delivery empty", `{` + baseD + `,"delivery":{ }}`, "", ""},
		{"delivery sequence 1.0", `{` + baseD + `,"delivery":{"sequence":1.0,"mode":"at_l\u0065ast_once"}}`, "", ""},
		{"delivery not object", `{` + baseD + `,"delivery":"best_effort"}`, "delivery", CodeDInvalidEnvelope},
		{"delivery null", `{` + baseD + `,"delivery":null}`, "delivery", CodeDInvalidEnvelope},
		{"delivery bad mode", `{` + baseD + `,"delivery":{"mode":"exactly_once"}}`, "delivery", CodeDInvalidEnvelope},
		{"delivery negative sequence", `{` + baseD + `,"delivery":{"sequence":-1}}`, "delivery", CodeDInvalidEnvelope},
		{"delivery fractional sequence", `{` + baseD + `,"delivery":{"sequence":1.5}}`, "delivery", CodeDInvalidEnvelope},
		{"delivery string sequence", `{` + baseD + `,"delivery":{"sequence":"1"}}`, "delivery", CodeDInvalidEnvelope},
		{"delivery cursor number", `{` + baseD + `,"delivery":{"cursor":1}}`, "delivery", CodeDInvalidEnvelope},
		{"delivery escaped name", `{` + baseD + `,"deliver\u0079":{"mode":"best_effort"}}`, "delivery", CodeDInvalidEnvelope},
		{"payload_schema URI", `{` + baseD + `,"payload_schema":"https://schemas.axisrobo.com/tool.call.progress.v1.json"}`, "", ""},
		{"payload_schema not URI", `{` + baseD + `,"payload_schema":"tool call"}`, "payload_schema", CodeDInvalidEnvelope},
		{"belief_status", `{` + baseD + `,"belief_status":"revised","belief_scope":"fact","source_trust":"signed","interruption_policy":"force_stop"}`, "", ""},
		{"belief_status bad", `{` + baseD + `,"belief_status":"maybe"}`, "belief_status", CodeDInvalidEnvelope},
		{"confidence", `{` + baseD + `,"confidence":0.75}`, "", ""},
		{"confidence one", `{` + baseD + `,"confidence":1}`, "", ""},
		{"confidence high", `{` + baseD + `,"confidence":1.5}`, "confidence", CodeDInvalidEnvelope},
		{"confidence tiny", `{` + baseD + `,"confidence":1e-400}`, "", ""},
		{"confidence string", `{` + baseD + `,"confidence":"0.5"}`, "confidence", CodeDInvalidEnvelope},
		{"attestation_count negative", `{` + baseD + `,"attestation_count":-1}`, "attestation_count", CodeDInvalidEnvelope},
		{"attestation_count huge", `{` + baseD + `,"attestation_count":1e400}`, "", ""},
		{"stale_after empty", `{` + baseD + `,"stale_after":""}`, "stale_after", CodeDInvalidEnvelope},
		{"evidence_chain", `{` + baseD + `,"evidence_chain":[{"source":"s","id":"1"},{"id":"2","source":"t","note":[1,{"a":2}]}]}`, "", ""},
		{"evidence_chain empty", `{` + baseD + `,"evidence_chain":[ ]}`, "", ""},
		{"evidence_chain missing id", `{` + baseD + `,"evidence_chain":[{"source":"s","id":"1"},{"source":"s"}]}`, "evidence_chain", CodeDInvalidEnvelope},
		{"evidence_chain escaped names", `{` + baseD + `,"evidence_chain":[{"sourc\u0065":"s","\u0069d":"1"}]}`, "", ""},
		{"evidence_chain non-string id", `{` + baseD + `,"evidence_chain":[{"source":"s","id":1}]}`, "evidence_chain", CodeDInvalidEnvelope},
		{"evidence_chain element not object", `{` + baseD + `,"evidence_chain":["x"]}`, "evidence_chain", CodeDInvalidEnvelope},
		{"version 0.2", `{` + strings.Replace(baseD, `"0.1"`, `"0.2"`, 1) + `}`, "aep_version", CodeDUnsupportedVersion},
		{"version empty", `{` + strings.Replace(baseD, `"0.1"`, `""`, 1) + `}`, "aep_version", CodeDInvalidEnvelope},
		{"R event at D endpoint", `{` + baseR + `,"session":"s1","seq":0}`, "aep", CodeDInvalidEnvelope},
		{"no version", `{"id":"e","type":"a.b","source":"s","created_at":"2026-07-09T10:00:00Z","payload":{}}`, "aep_version", CodeDInvalidEnvelope},
		{"both versions", `{` + baseD + `,"aep":"0.1"}`, "", CodeDInvalidEnvelope},
		{"duplicate id", `{` + baseD + `,"id":"evt_2"}`, "id", CodeDInvalidEnvelope},
		{"duplicate unknown", `{` + baseD + `,"zz":1,"zz":2}`, "zz", CodeDInvalidEnvelope},
		{"malformed", `{` + baseD, "", CodeDInvalidEnvelope},
		{"too many unknown members", `{` + baseD + manyExt(65) + `}`, "", CodeDProtocolError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ParseAs(DialectD, []byte(tt.event), Limits{})
			if tt.code == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				ref, rerr := refAttrs([]byte(tt.event))
				if rerr != nil || !attrsEqual(a, ref) {
					t.Fatalf("attrs %+v, reference %+v (%v)", a, ref, rerr)
				}
				return
			}
			e := AsError(err)
			if e == nil {
				t.Fatalf("accepted: %+v", a)
			}
			if e.Code != tt.code || e.Field != tt.field || e.Dialect != DialectD || e.Retryable {
				t.Fatalf("got %v (code %q field %q), want code %q field %q", e, e.Code, e.Field, tt.code, tt.field)
			}
		})
	}
}

func TestDialectMismatchMessages(t *testing.T) {
	_, err := ParseAs(DialectR, []byte(`{`+baseD+`}`), Limits{})
	if e := AsError(err); e == nil || e.Kind != KindDialect || e.Code != CodeRInvalidEvent || !strings.Contains(e.Message, "POST /aep/events") {
		t.Fatalf("D event at R endpoint: %v", err)
	}
	_, err = ParseAs(DialectD, []byte(`{`+baseR+`,"session":"s","seq":1}`), Limits{})
	if e := AsError(err); e == nil || e.Kind != KindDialect || !strings.Contains(e.Message, "POST /events") {
		t.Fatalf("R event at D endpoint: %v", err)
	}
	for _, raw := range []string{`{"id":"x"}`, `{"aep":"0.1","aep_version":"0.1"}`, `[`} {
		_, err := Parse([]byte(raw), Limits{})
		e := AsError(err)
		if e == nil || e.Dialect != DialectUnknown || e.Code != e.Kind.String() {
			t.Errorf("Parse(%s): %v", raw, err)
		}
	}
	if d := Detect([]byte(`{` + baseD + `}`)); d != DialectD {
		t.Errorf("Detect D = %v", d)
	}
	if d := Detect([]byte(`{"aep":1}`)); d != DialectR {
		t.Errorf("Detect R = %v", d)
	}
	if _, err := ParseAs(DialectUnknown, []byte(`{}`), Limits{}); AsError(err) == nil {
		t.Error("ParseAs(DialectUnknown) accepted")
	}
}
