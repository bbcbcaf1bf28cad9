package aep

import (
	"encoding/json"
	"os"
	"testing"
	"unicode/utf8"
)

// FuzzParse: no input panics; an accepted event is valid UTF-8 JSON (by
// encoding/json.Valid and utf8.Valid), has no duplicate top-level member, and
// its Attrs agree with the slow encoding/json reference; input that
// encoding/json rejects is never accepted; ParseAs agrees with Parse.
func FuzzParse(f *testing.F) {
	for _, path := range []string{"testdata/r-golden.jsonl", "testdata/d-delivery.ndjson", "testdata/d-agent-runtime-semantics.ndjson", "testdata/d-session-flow.ndjson"} {
		for _, line := range readLines(f, path) {
			f.Add(line)
		}
	}
	if b, err := os.ReadFile("testdata/r-invalid-cases.json"); err == nil {
		var doc struct {
			Cases []struct {
				Event  json.RawMessage   `json:"event"`
				Events []json.RawMessage `json:"events"`
			} `json:"cases"`
		}
		if json.Unmarshal(b, &doc) == nil {
			for _, c := range doc.Cases {
				if c.Event != nil {
					f.Add([]byte(c.Event))
				}
				for _, e := range c.Events {
					f.Add([]byte(e))
				}
			}
		}
	}
	for _, s := range []string{
		`{` + baseR + `,"session":"s1","seq":0,"acme":"\u00e9\n","acme2":-0,"data":{"a":[1,{"b":null}]}}`,
		`{` + baseD + `,"evidence_chain":[{"source":"s","id":"1"}],"confidence":0.5,"expires_at":null}`,
		`{"aep":"0.1","aep":"0.1"}`, `{"\u0061ep":"0.1"}`, `[[[[`, `{"a":"\ud800"}`, "{\"a\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(checkParse)
}

// FuzzMember splices one fuzzed member into valid events of both dialects,
// so that the acceptance path (formats, enums, integers, extension names and
// values, scope rules) is explored, not only the syntax errors.
func FuzzMember(f *testing.F) {
	for _, s := range [][2]string{
		{"seq", "187"}, {"seq", "-0"}, {"epoch", "1.0"}, {"time", `"2026-07-03T23:59:60Z"`},
		{"time", `"2026-07-04T00:59:60+01:00"`}, {"source", `"aep://[::1]:80/a"`}, {"source", `"a:%zz"`},
		{"traceparent", `"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"`}, {"type", `"x.a-b.tool.c"`},
		{"type", `"agent.heartbeat"`}, {"type", `"control.cancel"`}, {"acme", `"\u00e9"`}, {"acme", "-0"},
		{"severity", `"notice"`}, {"capture", `"\u006eone"`}, {"created_at", `"2026-02-29T00:00:00Z"`},
		{"expires_at", "null"}, {"confidence", "1e-3"}, {"evidence_chain", `[{"source":"s","id":"i"}]`},
		{"payload_schema", `"https://e.x/s.json#a"`}, {"session_id", `"s"`}, {"delivery", "{}"},
		{"cause", `"01JX\u0039YB2Z1QK"`}, {"cause", `""`},
	} {
		f.Add(s[0], []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, name string, value []byte) {
		n := AppendJSONString(nil, name)
		for _, base := range []string{baseR + `,"session":"s1","seq":0`, baseD} {
			raw := append([]byte(`{`+base+`,`), n...)
			raw = append(append(append(raw, ':'), value...), '}')
			checkParse(t, raw)
			raw = append(append([]byte(`{`), n...), ':')
			raw = append(append(raw, value...), ","+base+"}"...)
			checkParse(t, raw)
		}
	})
}

var fuzzLimits = Limits{MaxDepth: 16, MaxExtensions: 8, MaxStringBytes: 256}

// checkParse asserts the invariants of Parse on one input.
func checkParse(t *testing.T, raw []byte) {
	lim := fuzzLimits
	orig := string(raw)
	a, err := Parse(raw, lim)
	if string(raw) != orig {
		t.Fatal("Parse modified its input")
	}
	if err != nil {
		e := AsError(err)
		if e == nil || e.Code == "" || e.Message == "" || e.Kind == 0 {
			t.Fatalf("error %#v is not a complete *Error", err)
		}
		for _, d := range []Dialect{DialectR, DialectD} {
			if _, err2 := ParseAs(d, raw, lim); err2 == nil {
				t.Fatalf("Parse refused (%v) but ParseAs(%v) accepted", err, d)
			}
		}
		return
	}
	if !json.Valid(raw) || !utf8.Valid(raw) {
		t.Fatalf("accepted input that is not valid UTF-8 JSON: %q", raw)
	}
	// Payload validation only ever refuses more, and with a complete error.
	withP := lim
	withP.ValidatePayloads = true
	if b, err := Parse(raw, withP); err == nil {
		if !attrsEqual(a, b) {
			t.Fatalf("payload validation changed the attributes: %+v, %+v", a, b)
		}
	} else if e := AsError(err); e == nil || e.Code == "" || e.Message == "" || e.HTTPStatus() != 400 {
		t.Fatalf("payload refusal %#v is not a complete 400 *Error", err)
	}
	ms, dup, rerr := refMembers(raw)
	if rerr != nil || dup {
		t.Fatalf("accepted input with duplicate members or that the reference cannot read (%v): %q", rerr, raw)
	}
	if len(ms) == 0 {
		t.Fatal("accepted an empty object")
	}
	ref, rerr := refAttrs(raw)
	if rerr != nil || !attrsEqual(a, ref) {
		t.Fatalf("attrs differ from the reference:\n got %+v\nwant %+v (%v)", a, ref, rerr)
	}
	b, err := ParseAs(a.Dialect, raw, lim)
	if err != nil || !attrsEqual(a, b) {
		t.Fatalf("ParseAs(%v) disagrees: %v", a.Dialect, err)
	}
}
