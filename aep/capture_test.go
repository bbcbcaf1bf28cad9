package aep

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The dialect R conformance fixtures on capture (testdata/README.md):
// r-downlevel-cases.json (AEP-0001 §8.2 at a fan-out hop),
// r-capture-gating-cases.json (AEP-0006 answer.values gating) and
// r-capture-redaction-cases.json (the AEP-0003 §9.4 pipeline corpus).

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

type downlevelCase struct {
	Name          string          `json:"name"`
	Ceiling       string          `json:"ceiling"`
	Event         json.RawMessage `json:"event"`
	ExpectCapture string          `json:"expect_capture"`
	ExpectData    json.RawMessage `json:"expect_data"`
}

func downlevelCases(t testing.TB) []downlevelCase {
	var f struct{ Cases []downlevelCase }
	readJSON(t, "testdata/r-downlevel-cases.json", &f)
	if len(f.Cases) == 0 {
		t.Fatal("no cases")
	}
	return f.Cases
}

func mustCapture(t testing.TB, s string) Capture {
	t.Helper()
	c, ok := ParseCapture(s)
	if !ok {
		t.Fatalf("capture %q", s)
	}
	return c
}

// topMembers decodes a JSON object's members in document order.
func topMembers(t testing.TB, raw []byte) (names []string, vals map[string]any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", raw)
	}
	vals = map[string]any{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		names = append(names, tok.(string))
		vals[tok.(string)] = v
	}
	return names, vals
}

func decodeAny(t testing.TB, raw []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	return v
}

// TestDownlevelFixtures runs every case of the R downlevel corpus: the
// rewritten capture and data must be the expected ones, every other member
// must keep its value and its position, and the output must still be a
// valid R event whose routing attributes differ only in Capture.
func TestDownlevelFixtures(t *testing.T) {
	for _, c := range downlevelCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			in := []byte(c.Event)
			ain, err := Parse(in, Limits{})
			if err != nil {
				t.Fatalf("fixture event does not parse: %v", err)
			}
			ceiling := mustCapture(t, c.Ceiling)
			out, changed, err := Downlevel(in, ceiling, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if changed != NeedsDownlevel(&ain, ceiling) {
				t.Errorf("changed = %v, NeedsDownlevel = %v", changed, !changed)
			}
			if !changed && &out[0] != &in[0] {
				t.Error("unchanged output is not raw itself")
			}
			inNames, inVals := topMembers(t, in)
			outNames, outVals := topMembers(t, out)
			if got := outVals["capture"]; got != c.ExpectCapture {
				t.Errorf("capture = %v, want %s\n%s", got, c.ExpectCapture, out)
			}
			if string(c.ExpectData) == "null" {
				if _, ok := outVals["data"]; ok {
					t.Errorf("data kept, want it removed:\n%s", out)
				}
			} else if want := decodeAny(t, c.ExpectData); !reflect.DeepEqual(outVals["data"], want) {
				t.Errorf("data =\n%s\nwant\n%s", mustMarshal(outVals["data"]), c.ExpectData)
			}
			// Untouched members: same values, same order.
			keep := func(names []string) []string {
				return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == "data" || n == "capture" })
			}
			if a, b := keep(inNames), keep(outNames); !slices.Equal(a, b) {
				t.Errorf("member order changed: %v -> %v", a, b)
			}
			for _, n := range keep(inNames) {
				if !reflect.DeepEqual(inVals[n], outVals[n]) {
					t.Errorf("member %s changed: %v -> %v", n, inVals[n], outVals[n])
				}
			}
			aout, err := Parse(out, Limits{})
			if err != nil {
				t.Fatalf("output does not parse: %v\n%s", err, out)
			}
			ain.Capture, aout.Capture = "", ""
			if !reflect.DeepEqual(ain, aout) {
				t.Errorf("routing attributes changed:\n%+v\n%+v", ain, aout)
			}
			// Idempotent, and never above the ceiling.
			if again, ch, err := Downlevel(out, ceiling, Limits{}); err != nil || ch || !bytes.Equal(again, out) {
				t.Errorf("second pass: changed=%v err=%v", ch, err)
			}
		})
	}
}

func mustMarshal(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// TestDownlevelNeverUplevels runs every fixture event at every ceiling: the
// output level is never above the ceiling nor above the input's level, an
// event at or below the ceiling comes back byte-identical, and a full event
// never comes out redacted.
func TestDownlevelNeverUplevels(t *testing.T) {
	for _, c := range downlevelCases(t) {
		in := []byte(c.Event)
		a, err := Parse(in, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		level := EventCapture(&a)
		for ceiling := CaptureNone; ceiling <= CaptureFull; ceiling++ {
			out, changed, err := Downlevel(in, ceiling, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			b, err := Parse(out, Limits{})
			if err != nil {
				t.Fatalf("%s at %s: %v", c.Name, ceiling, err)
			}
			got := EventCapture(&b)
			switch {
			case level <= ceiling && (changed || !bytes.Equal(out, in)):
				t.Errorf("%s at %s: %s event changed", c.Name, ceiling, level)
			case got > ceiling || got > level:
				t.Errorf("%s at %s: %s event came out %s", c.Name, ceiling, level, got)
			case level == CaptureFull && got == CaptureRedacted:
				t.Errorf("%s at %s: redacted minted from full", c.Name, ceiling)
			}
		}
	}
}

// formCase is one capture-gating case: the request's field_specs, the
// answer's values, the ceiling the emitter gates for and the values that
// may come out.
type formCase struct {
	Name    string          `json:"name"`
	Fields  json.RawMessage `json:"fields"`
	Values  json.RawMessage `json:"values"`
	Ceiling string          `json:"ceiling"`
	Expect  map[string]any  `json:"expect"`
}

// TestCaptureGatingFixtures: the capture-gating corpus pins an emitter's
// gate, which knows the request's field_specs. A relay hop does not have
// them, so its down-leveling of answer.values must be at least as strict:
// for every case, an attention.answered and a control.attention.respond at
// capture full carrying the case's values, down-leveled to the case's
// ceiling, keep a subset of the expected values with the same JSON values.
func TestCaptureGatingFixtures(t *testing.T) {
	var f struct{ Cases []formCase }
	readJSON(t, "testdata/r-capture-gating-cases.json", &f)
	if len(f.Cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range f.Cases {
		for _, typ := range []string{"attention.answered", "control.attention.respond"} {
			t.Run(c.Name+"/"+typ, func(t *testing.T) {
				seq := `,"seq":4`
				if typ == "control.attention.respond" {
					seq = ""
				}
				ev := `{"aep":"0.1","id":"CG","type":"` + typ + `","subject":"R1","time":"2026-07-03T10:00:00Z","source":"aep://h/agent/a","agent":"a","session":"s1"` + seq +
					`,"capture":"full","data":{"answer":{"option":"2","text":"free","values":` + string(c.Values) + `}}}`
				out, _, err := Downlevel([]byte(ev), mustCapture(t, c.Ceiling), Limits{})
				if err != nil {
					t.Fatal(err)
				}
				_, vals := topMembers(t, out)
				var kept map[string]any
				if d, ok := vals["data"].(map[string]any); ok {
					kept, _ = d["answer"].(map[string]any)["values"].(map[string]any)
				}
				want := decodeAny(t, mustMarshal(c.Expect)).(map[string]any)
				for k, v := range kept {
					if w, ok := want[k]; !ok || !reflect.DeepEqual(v, w) {
						t.Errorf("kept %s=%v, the field-spec-aware gate does not (expect %v)", k, v, c.Expect)
					}
				}
				// Structural primitives survive whenever the gate keeps them
				// and the hop keeps data at all.
				if mustCapture(t, c.Ceiling) > CaptureNone {
					for k, v := range want {
						switch v.(type) {
						case bool, json.Number:
							if _, ok := kept[k]; !ok {
								t.Errorf("structural %s=%v dropped", k, v)
							}
						}
					}
				}
			})
		}
	}
}

// TestRedactionCorpusNeverLeaks: this gateway is a mechanical hop, never a
// redacting re-emitter (AEP-0001 §8.2(e)), so it does not run the §9.4
// pipeline and the corpus' must_contain assertions (the pipeline's output)
// do not apply to it. What does apply: content that the pipeline exists
// for never reaches a consumer below the level its field is gated at. Each
// text and value input is put in every redacted- and full-gated position of
// a representative set of types, at capture full and redacted, and
// down-leveled to metadata and none: no must_not_contain string and no
// input string may appear in the output.
func TestRedactionCorpusNeverLeaks(t *testing.T) {
	var f struct {
		TextCases []struct {
			Name           string   `json:"name"`
			Input          string   `json:"input"`
			MustNotContain []string `json:"must_not_contain"`
		} `json:"text_cases"`
		ValueCases []struct {
			Name           string          `json:"name"`
			Input          json.RawMessage `json:"input"`
			MustNotContain []string        `json:"must_not_contain"`
		} `json:"value_cases"`
	}
	readJSON(t, "testdata/r-capture-redaction-cases.json", &f)
	if len(f.TextCases) == 0 || len(f.ValueCases) == 0 {
		t.Fatal("no cases")
	}
	type input struct {
		name   string
		raw    string // JSON value
		needle []string
	}
	var ins []input
	for _, c := range f.TextCases {
		ins = append(ins, input{c.Name, string(AppendJSONString(nil, c.Input)), append(c.MustNotContain, c.Input)})
	}
	for _, c := range f.ValueCases {
		ins = append(ins, input{c.Name, string(c.Input), c.MustNotContain})
	}
	// %s is replaced by the input value; each template puts it where the
	// payload schema gates it above metadata.
	templates := []struct{ typ, data string }{
		{"tool.completed", `{"tool":{"name":"Bash"},"status":"success","result":%s,"result_redacted":%s,"result_digest":"ab12"}`},
		{"tool.requested", `{"tool":{"name":"Bash"},"args":%s,"args_redacted":%s,"args_digest":"ab12"}`},
		{"tool.failed", `{"tool":{"name":"Bash"},"error":{"type":"E","message":%s}}`},
		{"run.started", `{"trigger":"user","prompt":%s}`},
		{"session.started", `{"label":%s,"cwd":%s,"client":{"name":"cli"}}`},
		{"attention.requested", `{"kind":"permission","prompt":%s,"options":[{"id":"allow","label":%s}],"fields":[{"id":"1","type":"select","label":%s,"choices":[{"id":"1","label":%s}]}],"context":%s}`},
		{"attention.answered", `{"answer":{"option":"1","text":%s,"values":{"a":%s,"b":true}}}`},
		{"resource.citation.recorded", `{"citations":[{"source":{"id":"d","uri":%s,"title":%s},"cited_text":%s,"cited_text_redacted":%s}]}`},
		{"resource.retrieval.reranked", `{"query":%s,"input_documents":[{"id":"d","content":%s,"content_redacted":%s}],"output_documents":[{"id":"d","content":%s}]}`},
		{"state.delta", `{"key":"k","delta":%s}`},
		{"x.acme.tool.blob", `{"anything":%s}`},
	}
	for _, in := range ins {
		for _, tp := range templates {
			data := strings.ReplaceAll(tp.data, "%s", in.raw)
			for _, level := range []string{"full", "redacted"} {
				ev := `{"aep":"0.1","id":"RC","type":"` + tp.typ + `","subject":"Bash","time":"2026-07-03T10:00:00Z","source":"aep://h/agent/a","agent":"a","session":"s1","seq":1,"capture":"` + level + `","data":` + data + `}`
				if _, err := Parse([]byte(ev), Limits{}); err != nil {
					t.Fatalf("%s/%s: %v", in.name, tp.typ, err)
				}
				for _, ceiling := range []Capture{CaptureMetadata, CaptureNone} {
					out, changed, err := Downlevel([]byte(ev), ceiling, Limits{})
					if err != nil || !changed {
						t.Fatalf("%s/%s: changed=%v err=%v", in.name, tp.typ, changed, err)
					}
					for _, n := range in.needle {
						if n != "" && bytes.Contains(out, []byte(n)) || bytes.Contains(out, []byte(in.raw)) {
							t.Errorf("%s in %s at %s leaks %q:\n%s", in.name, tp.typ, ceiling, n, out)
						}
					}
				}
			}
		}
	}
}

// TestCaptureAnnotationTable checks the gate table against every
// x-aep-capture annotation of the payload schemas
// (testdata/r-capture-annotations.json, derived from schemas/types/): the
// annotated types are exactly the table's types, and the members above
// metadata are exactly the table's gated paths.
func TestCaptureAnnotationTable(t *testing.T) {
	var f struct{ Types map[string]map[string]string }
	readJSON(t, "testdata/r-capture-annotations.json", &f)
	if len(f.Types) < 40 {
		t.Fatalf("%d types", len(f.Types))
	}
	want := map[string]bool{} // "type path level"
	for typ, ann := range f.Types {
		if len(ann) == 0 {
			if gateTypes[typ] != nil {
				t.Errorf("%s: no annotated properties, so data is stripped wholesale; the table has it", typ)
			}
			continue
		}
		if gateTypes[typ] == nil {
			t.Errorf("%s: annotated, missing from the table", typ)
		}
		for path, lvl := range ann {
			if lvl != "metadata" {
				want[typ+" "+path+" "+lvl] = true
			}
		}
	}
	got := map[string]bool{}
	var walk func(typ, base string, n *gateNode)
	walk = func(typ, base string, n *gateNode) {
		if n == nil {
			return
		}
		for _, e := range n.members {
			p := e.name
			if base != "" {
				p = base + "." + e.name
			}
			if e.level != CaptureMetadata {
				got[typ+" "+p+" "+e.level.String()] = true
			}
			walk(typ, p, e.node)
		}
		walk(typ, base+"[]", n.items)
	}
	for typ, n := range gateTypes {
		if _, ok := f.Types[typ]; !ok {
			t.Errorf("%s: in the table, not in the schemas", typ)
		}
		walk(typ, "", n)
	}
	var missing, extra []string
	for k := range want {
		if !got[k] {
			missing = append(missing, k)
		}
	}
	for k := range got {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing)+len(extra) > 0 {
		t.Errorf("table drift: missing %v, extra %v", missing, extra)
	}
}
