package aep

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func readLines(t testing.TB, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) > 0 {
			out = append(out, append([]byte(nil), sc.Bytes()...))
		}
	}
	return out
}

// The R golden corpus is valid: every event is accepted by both entry points
// and its Attrs equal the encoding/json reference.
func TestGoldenR(t *testing.T) {
	lines := readLines(t, "testdata/r-golden.jsonl")
	if len(lines) != 64 {
		t.Fatalf("golden corpus has %d events, want 64", len(lines))
	}
	for i, line := range lines {
		a, err := ParseAs(DialectR, line, Limits{})
		if err != nil {
			t.Errorf("golden[%d]: %v", i, err)
			continue
		}
		b, err := Parse(line, Limits{})
		if err != nil || !attrsEqual(a, b) {
			t.Errorf("golden[%d]: Parse disagrees with ParseAs: %v", i, err)
		}
		ref, err := refAttrs(line)
		if err != nil {
			t.Fatal(err)
		}
		if !attrsEqual(a, ref) {
			t.Errorf("golden[%d]:\n got %+v\nwant %+v", i, a, ref)
		}
	}
}

func TestWorkedExampleR(t *testing.T) {
	// AEP-0001 §5.3, plus an extension attribute written with an escape.
	raw := []byte(`{"aep":"0.1","id":"01JX9YB3P4T9","type":"tool.completed","subject":"Bash",
	"time":"2026-07-03T10:15:04.221Z","source":"aep://host-a/agent/claude-code/session/s_8f2c",
	"agent":"claude-code","session":"s_8f2c","run":"r_0042","step":"turn-3","seq":187,"epoch":0,
	"cause":"01JX9YB2Z1QK","severity":"info","capture":"metadata",
	"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	"acmeregion":"eu\u002d1","acmetries":3,"acmeok":true,
	"data":{"tool":{"name":"Bash","call_id":"t_91"},"status":"success","duration_ms":1240}}`)
	got, err := ParseAs(DialectR, raw, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := Attrs{
		Dialect: DialectR, ID: "01JX9YB3P4T9", Type: "tool.completed",
		Source: "aep://host-a/agent/claude-code/session/s_8f2c", Session: "s_8f2c",
		Agent: "claude-code", Subject: "Bash", Run: "r_0042", Step: "turn-3", Cause: "01JX9YB2Z1QK",
		Severity: "info", Capture: "metadata", Epoch: 0, HasEpoch: true, Seq: 187, HasSeq: true,
		Ext: []Ext{
			{Name: "acmeregion", Value: []byte(`"eu-1"`)},
			{Name: "acmetries", Value: []byte(`3`)},
			{Name: "acmeok", Value: []byte(`true`)},
		},
	}
	if !attrsEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	// The strings are fresh: scribbling over the input changes nothing.
	for i := range raw {
		raw[i] = 'X'
	}
	if !attrsEqual(got, want) {
		t.Fatal("Attrs alias the input buffer")
	}
}

// The R invalid corpus: every envelope case is refused naming the attribute
// at fault. Cases about payload schemas (AEP-0002 §5) and about streams of
// events (ordering, terminal exclusivity, ack decisions) are not envelope
// rules: a relay validates the envelope only (docs/dialects.md), so those
// events are accepted one by one.
func TestInvalidCasesR(t *testing.T) {
	envelope := map[string]string{ // case name -> Field
		"session-scoped without session":                "session",
		"session-scoped without seq":                    "seq",
		"agent-scoped with session":                     "session",
		"agent-scoped with seq":                         "seq",
		"command with seq":                              "seq",
		"attention.routed with seq":                     "seq",
		"single-segment type":                           "type",
		"unknown category":                              "type",
		"uppercase in type":                             "type",
		"vendor type too short (x.vendor.verb)":         "type",
		"extension attribute name over 20 chars":        "acmeveryveryverylongext1",
		"extension attribute with object value":         "acmemeta",
		"extension attribute name with illegal charset": "acme_ext",
		"unknown severity":                              "severity",
		"malformed traceparent":                         "traceparent",
		"unsupported envelope version":                  "aep",
		"negative seq":                                  "seq",
	}
	b, err := os.ReadFile("testdata/r-invalid-cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []struct {
			Name   string            `json:"name"`
			Rule   string            `json:"rule"`
			Event  json.RawMessage   `json:"event"`
			Events []json.RawMessage `json:"events"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, c := range doc.Cases {
		field, isEnvelope := envelope[c.Name]
		if isEnvelope {
			seen++
			_, err := ParseAs(DialectR, c.Event, Limits{})
			e := AsError(err)
			switch {
			case e == nil:
				t.Errorf("%s (%s): accepted", c.Name, c.Rule)
			case e.Field != field || e.Dialect != DialectR || e.HTTPStatus() != 400:
				t.Errorf("%s: got %v field %q status %d, want field %q status 400", c.Name, e, e.Field, e.HTTPStatus(), field)
			case c.Name == "unsupported envelope version" && (e.Kind != KindVersion || e.Code != CodeRInvalidEvent):
				t.Errorf("%s: got kind %v code %q", c.Name, e.Kind, e.Code)
			case c.Name != "unsupported envelope version" && (e.Kind != KindInvalid || e.Code != CodeRInvalidEvent):
				t.Errorf("%s: got kind %v code %q", c.Name, e.Kind, e.Code)
			}
			continue
		}
		events := c.Events
		if c.Event != nil {
			events = append(events, c.Event)
		}
		for i, ev := range events {
			if _, err := ParseAs(DialectR, ev, Limits{}); err != nil {
				t.Errorf("%s [%d] (%s) is not an envelope rule but was refused: %v", c.Name, i, c.Rule, err)
			}
		}
	}
	if seen != len(envelope) {
		t.Errorf("matched %d envelope cases, want %d (fixture renamed?)", seen, len(envelope))
	}
}

// base is a minimal valid session-scoped R event; tests splice members in.
const baseR = `"aep":"0.1","id":"E1","type":"progress.status","time":"2026-07-03T10:00:00Z","source":"aep://h/agent/a","agent":"a"`

func TestRulesR(t *testing.T) {
	sess := `,"session":"s1","seq":0`
	tests := []struct {
		name  string
		event string
		field string // "" = accepted
		kind  Kind
	}{
		{"minimal", `{` + baseR + sess + `}`, "", 0},
		{"missing id", `{"aep":"0.1","type":"progress.status","time":"2026-07-03T10:00:00Z","source":"aep://h","agent":"a"` + sess + `}`, "id", KindInvalid},
		{"missing time", `{"aep":"0.1","id":"E","type":"progress.status","source":"aep://h","agent":"a"` + sess + `}`, "time", KindInvalid},
		{"missing agent", `{"aep":"0.1","id":"E","type":"progress.status","time":"2026-07-03T10:00:00Z","source":"aep://h"` + sess + `}`, "agent", KindInvalid},
		{"missing source", `{"aep":"0.1","id":"E","type":"progress.status","time":"2026-07-03T10:00:00Z","agent":"a"` + sess + `}`, "source", KindInvalid},
		{"empty id", `{` + strings.Replace(baseR, `"E1"`, `""`, 1) + sess + `}`, "id", KindInvalid},
		{"numeric id", `{` + strings.Replace(baseR, `"E1"`, `1`, 1) + sess + `}`, "id", KindInvalid},
		{"null subject", `{` + baseR + sess + `,"subject":null}`, "subject", KindInvalid},
		{"null data", `{` + baseR + sess + `,"data":null}`, "data", KindInvalid},
		{"array data", `{` + baseR + sess + `,"data":[]}`, "data", KindInvalid},
		{"null extension", `{` + baseR + sess + `,"acme":null}`, "acme", KindInvalid},
		{"float extension", `{` + baseR + sess + `,"acme":1.5}`, "acme", KindInvalid},
		{"exponent extension", `{` + baseR + sess + `,"acme":1e3}`, "acme", KindInvalid},
		{"array extension", `{` + baseR + sess + `,"acme":[1]}`, "acme", KindInvalid},
		{"uppercase extension name", `{` + baseR + sess + `,"Acme":"x"}`, "Acme", KindInvalid},
		{"empty extension name", `{` + baseR + sess + `,"":"x"}`, "", KindInvalid},
		{"20-char extension name", `{` + baseR + sess + `,"abcdefghij0123456789":"x"}`, "", 0},
		{"D member in R event", `{` + baseR + sess + `,"session_id":"x"}`, "session_id", KindInvalid},
		{"core-looking scalar is an extension", `{` + baseR + sess + `,"payload":"x"}`, "", 0},
		{"core-looking object is not", `{` + baseR + sess + `,"payload":{}}`, "payload", KindInvalid},
		{"aep not a string", `{"aep":0.1,"id":"E1","type":"progress.status","time":"2026-07-03T10:00:00Z","source":"aep://h","agent":"a"` + sess + `}`, "aep", KindInvalid},
		{"aep 1.0", `{` + strings.Replace(baseR, `"0.1"`, `"1.0"`, 1) + sess + `}`, "aep", KindVersion},
		{"version checked first", `{"aep":"9.9"}`, "aep", KindVersion},
		{"seq float", `{` + baseR + `,"session":"s1","seq":1.0}`, "seq", KindInvalid},
		{"seq exponent", `{` + baseR + `,"session":"s1","seq":1e2}`, "seq", KindInvalid},
		{"seq string", `{` + baseR + `,"session":"s1","seq":"1"}`, "seq", KindInvalid},
		{"seq minus zero", `{` + baseR + `,"session":"s1","seq":-0}`, "seq", KindInvalid},
		{"seq max int64", `{` + baseR + `,"session":"s1","seq":9223372036854775807}`, "", 0},
		{"seq over int64", `{` + baseR + `,"session":"s1","seq":9223372036854775808}`, "seq", KindInvalid},
		{"epoch negative", `{` + baseR + sess + `,"epoch":-1}`, "epoch", KindInvalid},
		{"severity upper", `{` + baseR + sess + `,"severity":"INFO"}`, "severity", KindInvalid},
		{"capture bad", `{` + baseR + sess + `,"capture":"all"}`, "capture", KindInvalid},
		{"capture full", `{` + baseR + sess + `,"capture":"full"}`, "", 0},
		{"time without zone", `{` + strings.Replace(baseR, `10:00:00Z`, `10:00:00`, 1) + sess + `}`, "time", KindInvalid},
		{"time offset", `{` + strings.Replace(baseR, `10:00:00Z`, `10:00:00.5+05:30`, 1) + sess + `}`, "", 0},
		{"time feb 30", `{` + strings.Replace(baseR, `2026-07-03`, `2026-02-30`, 1) + sess + `}`, "time", KindInvalid},
		{"source not a URI", `{` + strings.Replace(baseR, `aep://h/agent/a`, `host a`, 1) + sess + `}`, "source", KindInvalid},
		{"source relative", `{` + strings.Replace(baseR, `aep://h/agent/a`, `/agent/a`, 1) + sess + `}`, "source", KindInvalid},
		{"source urn", `{` + strings.Replace(baseR, `aep://h/agent/a`, `urn:agent:a`, 1) + sess + `}`, "", 0},
		{"traceparent upper hex", `{` + baseR + sess + `,"traceparent":"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"}`, "traceparent", KindInvalid},
		{"traceparent zero trace", `{` + baseR + sess + `,"traceparent":"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}`, "traceparent", KindInvalid},
		{"traceparent version ff", `{` + baseR + sess + `,"traceparent":"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`, "traceparent", KindInvalid},
		{"vendor type", `{` + strings.Replace(baseR, `progress.status`, `x.claude-code.session.config_change`, 1) + sess + `}`, "", 0},
		{"vendor dash outside vendor", `{` + strings.Replace(baseR, `progress.status`, `x.acme.session.config-change`, 1) + sess + `}`, "type", KindInvalid},
		{"type empty segment", `{` + strings.Replace(baseR, `progress.status`, `progress..status`, 1) + sess + `}`, "type", KindInvalid},
		{"type trailing dot", `{` + strings.Replace(baseR, `progress.status`, `progress.`, 1) + sess + `}`, "type", KindInvalid},
		{"unregistered member of a known category", `{` + strings.Replace(baseR, `progress.status`, `progress.some_future_member`, 1) + sess + `,"futureext":"x"}`, "", 0},
		{"agent-scoped", `{` + strings.Replace(baseR, `progress.status`, `agent.heartbeat`, 1) + `}`, "", 0},
		{"agent-scoped with run", `{` + strings.Replace(baseR, `progress.status`, `agent.heartbeat`, 1) + `,"run":"r"}`, "run", KindInvalid},
		{"command", `{` + strings.Replace(baseR, `progress.status`, `control.cancel`, 1) + `,"session":"s1"}`, "", 0},
		{"command without session", `{` + strings.Replace(baseR, `progress.status`, `control.pause`, 1) + `}`, "session", KindInvalid},
		{"vendor command without seq", `{` + strings.Replace(baseR, `progress.status`, `x.acme.control.reboot`, 1) + `,"session":"s1"}`, "", 0},
		{"vendor command with seq", `{` + strings.Replace(baseR, `progress.status`, `x.acme.control.reboot`, 1) + sess + `}`, "seq", KindInvalid},
		{"control ack is sequenced", `{` + strings.Replace(baseR, `progress.status`, `control.accepted`, 1) + `,"session":"s1"}`, "seq", KindInvalid},
		{"too many extensions", `{` + baseR + sess + manyExt(65) + `}`, "", KindLimit},
		{"64 extensions", `{` + baseR + sess + manyExt(64) + `}`, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ParseAs(DialectR, []byte(tt.event), Limits{})
			if tt.kind == 0 {
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
			if e.Kind != tt.kind || e.Field != tt.field || e.Dialect != DialectR {
				t.Fatalf("got %v (kind %v field %q), want kind %v field %q", e, e.Kind, e.Field, tt.kind, tt.field)
			}
			if !strings.HasPrefix(e.Code, "invalid-event") && e.Code != CodeRLimitExceeded {
				t.Fatalf("code %q", e.Code)
			}
		})
	}
}

func manyExt(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(`,"ext`)
		b.WriteString(strings.Repeat("a", i%10))
		b.WriteByte(byte('a' + i/10))
		b.WriteString(`":1`)
	}
	return b.String()
}
