package aep

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

var withPayloads = Limits{ValidatePayloads: true}

func TestPayloadSchemasCompile(t *testing.T) {
	m, err := compilePayloadSchemas()
	if err != nil {
		t.Fatal(err)
	}
	// 46 registered types at 1d959a0, two of them (message.*) without a
	// payload schema.
	if len(m) != 44 {
		t.Fatalf("%d schemas, want 44", len(m))
	}
	for _, typ := range []string{"agent.presence", "run.finished", "state.delta", "attention.requested", "tool.completed"} {
		if m[typ] == nil {
			t.Errorf("no schema for %s", typ)
		}
	}
	_, err = compileNode(map[string]any{"type": "object", "patternProperties": map[string]any{}}, "")
	if err == nil || !strings.Contains(err.Error(), "patternProperties") {
		t.Fatalf("unimplemented keyword compiled: %v", err)
	}
}

type invalidCase struct {
	Name   string            `json:"name"`
	Rule   string            `json:"rule"`
	Event  json.RawMessage   `json:"event"`
	Events []json.RawMessage `json:"events"`
}

func invalidCasesR(t *testing.T) []invalidCase {
	b, err := os.ReadFile("testdata/r-invalid-cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Cases []invalidCase }
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Cases
}

// The R conformance corpus with payload validation on: every golden event is
// accepted, every single-event invalid case is refused with 400
// invalid-event, the payload-schema cases naming the field. With it off the
// payload-schema cases are accepted (a relay forwards what it does not
// understand).
func TestConformanceRPayloads(t *testing.T) {
	golden := readLines(t, "testdata/r-golden.jsonl")
	for i, line := range golden {
		if _, err := ParseAs(DialectR, line, withPayloads); err != nil {
			t.Errorf("golden[%d]: %v", i, err)
		}
	}
	if len(golden) != 64 {
		t.Errorf("%d golden events, want 64", len(golden))
	}
	payload := map[string]string{
		"form select field without choices":                                                   "data.fields[0].choices",
		"agent.presence with an unregistered state":                                           "data.state",
		"agent.presence missing the required state":                                           "data.state",
		"agent.health with an unregistered status":                                            "data.status",
		"session.compacted with a non-integer token count":                                    "data.estimated_token_count",
		"state.delta with a non-array delta":                                                  "data.delta",
		"run.finished cost missing the required currency":                                     "data.cost.currency",
		"tool.completed cost total is a string (amounts are numbers, not bare-float strings)": "data.cost.total",
	}
	single, seen := 0, 0
	for _, c := range invalidCasesR(t) {
		if c.Event == nil {
			continue // a stream case: cross-event rules, not one event's
		}
		single++
		_, err := ParseAs(DialectR, c.Event, withPayloads)
		e := AsError(err)
		if e == nil || e.Code != CodeRInvalidEvent || e.HTTPStatus() != 400 {
			t.Errorf("%s (%s): got %v, want 400 invalid-event", c.Name, c.Rule, err)
			continue
		}
		field, isPayload := payload[c.Name]
		if !isPayload {
			continue
		}
		seen++
		if e.Field != field || !strings.Contains(e.Message, field) {
			t.Errorf("%s: field %q message %q, want field %s", c.Name, e.Field, e.Message, field)
		}
		if _, err := ParseAs(DialectR, c.Event, Limits{}); err != nil {
			t.Errorf("%s: refused with payload validation off: %v", c.Name, err)
		}
	}
	if seen != len(payload) || single != 25 {
		t.Errorf("%d single-event cases, %d payload cases matched; want 25 and %d", single, seen, len(payload))
	}
}

func TestPayloadRules(t *testing.T) {
	ev := func(typ, data string) []byte {
		scope := `,"session":"s1","seq":0`
		if strings.HasPrefix(typ, "agent.") {
			scope = ""
		}
		return []byte(`{"aep":"0.1","id":"E1","type":"` + typ + `","time":"2026-07-03T10:00:00Z","source":"aep://h/agent/a","agent":"a"` + scope + `,"data":` + data + `}`)
	}
	tests := []struct {
		name, typ, data string
		field           string // "" = accepted
	}{
		{"empty data", "agent.presence", `{}`, "data.state"},
		{"state", "agent.presence", `{"state":"busy"}`, ""},
		{"escaped enum value", "agent.presence", `{"state":"b\u0075sy"}`, ""},
		{"escaped member name", "agent.presence", `{"st\u0061te":"asleep"}`, "data.state"},
		{"state null", "agent.presence", `{"state":null}`, "data.state"},
		{"unknown members allowed", "agent.presence", `{"state":"online","x":{"y":[1]}}`, ""},
		{"integer as 1.0", "session.compacted", `{"estimated_token_count":1.0}`, ""},
		{"integer as 1e3", "session.compacted", `{"estimated_token_count":1e3}`, ""},
		{"integer fraction", "session.compacted", `{"estimated_token_count":1.5}`, "data.estimated_token_count"},
		{"minimum", "run.finished", `{"duration_ms":-1}`, "data.duration_ms"},
		{"minimum zero", "run.finished", `{"duration_ms":0,"cost":{"currency":"EUR","total":0}}`, ""},
		{"nested minimum", "run.finished", `{"cost":{"currency":"EUR","total":-0.5}}`, "data.cost.total"},
		{"type list string", "tool.completed", `{"tool":{"name":"Bash"},"result":"ok"}`, ""},
		{"type list object", "tool.completed", `{"tool":{"name":"Bash"},"result":{"x":1}}`, ""},
		{"type list refused", "tool.completed", `{"tool":{"name":"Bash"},"result":7}`, "data.result"},
		{"object refused", "tool.completed", `{"tool":"Bash"}`, "data.tool"},
		{"nested required", "tool.completed", `{"tool":{"call_id":"c"}}`, "data.tool.name"},
		{"required tool", "tool.completed", `{"status":"success"}`, "data.tool"},
		{"array items", "attention.requested", `{"kind":"permission","prompt":"p","options":[{"id":"1","label":"a"},{"id":"2"}]}`, "data.options[1].label"},
		{"if/then not select", "attention.requested", `{"kind":"form","prompt":"p","fields":[{"id":"1","type":"string","label":"Name"}]}`, ""},
		{"if/then select with choices", "attention.requested", `{"kind":"form","prompt":"p","fields":[{"id":"1","type":"select","label":"DB","choices":[{"id":"a","label":"A"}]}]}`, ""},
		{"if/then select without choices", "attention.requested", `{"kind":"form","prompt":"p","fields":[{"id":"0","type":"string","label":"x"},{"id":"1","type":"select","label":"DB"}]}`, "data.fields[1].choices"},
		{"data not validated for an unregistered type", "progress.some_future_member", `{"state":5}`, ""},
		{"vendor type", "x.acme.progress.thing", `{"delta":"x"}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseAs(DialectR, ev(tc.typ, tc.data), withPayloads)
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			e := AsError(err)
			if e == nil || e.Field != tc.field || e.Code != CodeRInvalidEvent || e.HTTPStatus() != 400 {
				t.Fatalf("got %v (field %q), want invalid-event on %s", err, fieldOf(e), tc.field)
			}
			if _, err := ParseAs(DialectR, ev(tc.typ, tc.data), Limits{}); err != nil {
				t.Fatalf("refused with payload validation off: %v", err)
			}
		})
	}
	// An event without data is not checked (run.py checks the data an
	// event carries), and D events never are.
	noData := []byte(`{"aep":"0.1","id":"E1","type":"agent.presence","time":"2026-07-03T10:00:00Z","source":"aep://h/agent/a","agent":"a"}`)
	if _, err := ParseAs(DialectR, noData, withPayloads); err != nil {
		t.Fatal(err)
	}
	d := []byte(`{"aep_version":"0.1","id":"e","type":"agent.presence","source":"s","created_at":"2026-07-09T10:00:00Z","payload":{"state":5}}`)
	if _, err := ParseAs(DialectD, d, withPayloads); err != nil {
		t.Fatal(err)
	}
}

func fieldOf(e *Error) string {
	if e == nil {
		return ""
	}
	return e.Field
}

// Payload validation allocates nothing beyond what parsing does.
func TestPayloadAllocs(t *testing.T) {
	for _, line := range readLines(t, "testdata/r-golden.jsonl") {
		off := testing.AllocsPerRun(20, func() { _, _ = ParseAs(DialectR, line, Limits{}) })
		on := testing.AllocsPerRun(20, func() { _, _ = ParseAs(DialectR, line, withPayloads) })
		if on != off {
			t.Errorf("%s: %v allocs with payload validation, %v without", line[:60], on, off)
		}
	}
}

// BenchmarkPayloadValidation measures the cost per event of payload
// validation beside plain validation: the R golden corpus (64 events, every
// registered type with a schema) and the typical tool.completed event of
// BenchmarkParse.
func BenchmarkPayloadValidation(b *testing.B) {
	golden := readLines(b, "testdata/r-golden.jsonl")
	typical := benchEvents(b)[0].raw
	for _, lim := range []struct {
		name string
		lim  Limits
	}{{"plain", Limits{}}, {"payloads", withPayloads}} {
		b.Run("golden/"+lim.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				for _, ev := range golden {
					if _, err := ParseAs(DialectR, ev, lim.lim); err != nil {
						b.Fatal(err)
					}
				}
				n += len(golden)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/event")
		})
		b.Run("tool.completed-500B/"+lim.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseAs(DialectR, typical, lim.lim); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
