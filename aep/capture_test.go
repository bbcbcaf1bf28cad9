package aep

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
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

func TestParseCapture(t *testing.T) {
	for i, s := range []string{"none", "metadata", "redacted", "full"} {
		c, ok := ParseCapture(s)
		if !ok || c != Capture(i+1) || c.String() != s || !c.Valid() {
			t.Errorf("%q: %v %v", s, c, ok)
		}
		if i > 0 && !(Capture(i) < c) {
			t.Errorf("%s not above %s", c, Capture(i))
		}
	}
	for _, s := range []string{"", "None", "FULL", " full", "redact", "0"} {
		if c, ok := ParseCapture(s); ok || c != 0 {
			t.Errorf("%q parsed as %v", s, c)
		}
	}
	if Capture(0).String() != "" || Capture(9).String() != "" || Capture(0).Valid() || Capture(5).Valid() {
		t.Error("out-of-range levels")
	}
}

func TestEventCaptureAndNeedsDownlevel(t *testing.T) {
	r := func(c string) *Attrs { return &Attrs{Dialect: DialectR, Capture: c} }
	cases := []struct {
		a       *Attrs
		level   Capture
		ceiling Capture
		need    bool
	}{
		{r(""), CaptureMetadata, CaptureMetadata, false}, // absent = metadata
		{r(""), CaptureMetadata, CaptureNone, true},
		{r(""), CaptureMetadata, CaptureFull, false},
		{r("full"), CaptureFull, CaptureRedacted, true},
		{r("full"), CaptureFull, CaptureFull, false},
		{r("redacted"), CaptureRedacted, CaptureRedacted, false},
		{r("redacted"), CaptureRedacted, CaptureMetadata, true},
		{r("none"), CaptureNone, CaptureNone, false},
		{r("bogus"), 0, CaptureFull, true},        // cannot decide: Downlevel refuses
		{r("metadata"), CaptureMetadata, 0, true}, // no ceiling: fail closed
		{&Attrs{Dialect: DialectD}, 0, CaptureNone, false},
		{&Attrs{Dialect: DialectD, Capture: "full"}, 0, CaptureNone, false},
	}
	for i, c := range cases {
		if got := EventCapture(c.a); got != c.level {
			t.Errorf("%d: EventCapture = %v, want %v", i, got, c.level)
		}
		if got := NeedsDownlevel(c.a, c.ceiling); got != c.need {
			t.Errorf("%d: NeedsDownlevel(%+v, %v) = %v", i, *c.a, c.ceiling, got)
		}
	}
}

// env is a valid session-scoped R envelope without capture and data.
const env = `"aep":"0.1","id":"E1","type":"tool.completed","subject":"Bash","time":"2026-07-03T10:00:00Z","source":"aep://h/agent/a","agent":"a","session":"s1","seq":1`

// TestDownlevelExact pins whole outputs: untouched members keep their bytes,
// whitespace and position; capture is rewritten in place or appended; data
// is rewritten in place or removed with one comma.
func TestDownlevelExact(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		ceiling Capture
		want    string // "" = unchanged
	}{
		{"absent capture is metadata: unchanged at metadata",
			`{` + env + `,"data":{"result":"x"}}`, CaptureMetadata, ""},
		{"absent capture at none: appended, data removed (last)",
			`{` + env + `,"data":{"result":"x"}}`, CaptureNone, `{` + env + `,"capture":"none"}`},
		{"absent capture at none, no data",
			`{` + env + `}`, CaptureNone, `{` + env + `,"capture":"none"}`},
		{"absent capture at none, data first, whitespace kept",
			"{ \"data\" : {\"a\":1} ,\n \"aep\":\"0.1\",\"id\":\"E1\",\"type\":\"tool.completed\",\"time\":\"2026-07-03T10:00:00Z\",\"source\":\"aep://h/agent/a\",\"agent\":\"a\",\"session\":\"s1\",\"seq\":1 }\r\n",
			CaptureNone,
			"{ \"aep\":\"0.1\",\"id\":\"E1\",\"type\":\"tool.completed\",\"time\":\"2026-07-03T10:00:00Z\",\"source\":\"aep://h/agent/a\",\"agent\":\"a\",\"session\":\"s1\",\"seq\":1 ,\"capture\":\"none\"}\r\n"},
		{"capture in place, data in the middle removed, extensions and order kept",
			`{"zz":true,` + env + `, "capture" : "full" ,"data":{"result":"x"}, "acmeregion":"eu-1","n1":-3}`, CaptureNone,
			`{"zz":true,` + env + `, "capture" : "none" ,"acmeregion":"eu-1","n1":-3}`},
		{"full at redacted lands on metadata; digest, usage and unknown members kept; key order kept",
			`{` + env + `,"capture":"full","data":{"tool":{"name":"Bash"},"result":{"out":"x"},"result_redacted":"y","duration_ms":5,"result_digest":"ab","gen_ai.usage.input_tokens":3,"vendorx":{"result":"deep"}},"acme":1}`,
			CaptureRedacted,
			`{` + env + `,"capture":"metadata","data":{"tool":{"name":"Bash"},"duration_ms":5,"result_digest":"ab","gen_ai.usage.input_tokens":3,"vendorx":{"result":"deep"}},"acme":1}`},
		{"redacted source passes a redacted ceiling byte-identical",
			`{` + env + `,"capture":"redacted","data":{"result_redacted":"[REDACTED:secret]"}}`, CaptureRedacted, ""},
		{"full at full: unchanged",
			`{` + env + `,"capture":"full","data":{"result":"x"}}`, CaptureFull, ""},
		{"escaped member names are matched decoded, at both levels",
			`{` + env + `,"capture":"full","\u0064ata":{"res\u0075lt":"x","result_digest":"ab"}}`, CaptureMetadata,
			`{` + env + `,"capture":"metadata","\u0064ata":{"result_digest":"ab"}}`},
		{"duplicate gated members inside data are all removed",
			`{` + env + `,"capture":"full","data":{"result":"x","result":"y","status":"ok"}}`, CaptureMetadata,
			`{` + env + `,"capture":"metadata","data":{"status":"ok"}}`},
		{"pretty-printed data is compacted only where rewritten",
			`{` + env + `,"capture":"full","data":{ "tool" : { "name" : "Bash" } , "result" : [ 1, 2 ] }}`, CaptureMetadata,
			`{` + env + `,"capture":"metadata","data":{"tool":{ "name" : "Bash" }}}`},
		{"data that is not an object is removed (annotated type)",
			`{` + env + `,"capture":"full","data":"verbatim"}`, CaptureMetadata,
			`{` + env + `,"capture":"metadata"}`},
		{"empty data object stays",
			`{` + env + `,"capture":"full","data":{}}`, CaptureMetadata,
			`{` + env + `,"capture":"metadata","data":{}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := []byte(c.in)
			if _, err := Parse(in, Limits{}); err != nil && !strings.Contains(c.name, "not an object") {
				t.Fatalf("input: %v", err)
			}
			out, changed, err := Downlevel(in, c.ceiling, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if c.want == "" {
				if changed || &out[0] != &in[0] {
					t.Errorf("changed=%v, want raw back:\n%s", changed, out)
				}
				return
			}
			if !changed || string(out) != c.want {
				t.Errorf("changed=%v\n got %s\nwant %s", changed, out, c.want)
			}
			if _, err := Parse(out, Limits{}); err != nil {
				t.Errorf("output: %v", err)
			}
		})
	}
}

// TestDownlevelShapes pins the data rewrite for payloads whose shape the
// schema does not expect, and the [metadata*] degradations' edge cases.
func TestDownlevelShapes(t *testing.T) {
	ev := func(typ, subject, data string) string {
		s := `{"aep":"0.1","id":"E1","type":"` + typ + `"`
		if subject != "" {
			s += `,"subject":"` + subject + `"`
		}
		return s + `,"time":"2026-07-03T10:00:00Z","source":"aep://h/agent/a","agent":"cl\"aude","session":"s1","seq":1,"capture":"full","data":` + data + `}`
	}
	cases := []struct {
		name, typ, subject, data, want string
	}{
		{"error as a string instead of error_info is removed", "tool.failed", "", `{"tool":{"name":"B"},"error":"SECRET text"}`, `{"tool":{"name":"B"}}`},
		{"error as an array is removed", "tool.failed", "", `{"error":[{"message":"SECRET"}]}`, `{}`},
		{"documents as an object is removed", "resource.retrieval.returned", "", `{"documents":{"content":"SECRET"},"count":1}`, `{"count":1}`},
		{"documents: non-object elements removed, nested arrays of objects pruned", "resource.retrieval.returned", "", `{"documents":["SECRET",{"id":"d","content":"SECRET"},7]}`, `{"documents":[{"id":"d"}]}`},
		{"prompt without kind or subject", "attention.requested", "", `{"prompt":"SECRET"}`, `{"prompt":"cl\"aude requests attention"}`},
		{"prompt with a non-string kind and a non-string prompt", "attention.requested", "Bash", `{"kind":5,"prompt":{"t":"SECRET"}}`, `{"kind":5,"prompt":"cl\"aude requests attention: Bash"}`},
		{"prompt with an escaped kind", "attention.requested", "Bash", `{"prompt":"SECRET","kind":"inp\u0075t"}`, `{"prompt":"cl\"aude requests input: Bash","kind":"inp\u0075t"}`},
		{"options: numeric id, missing label, no id, non-object", "attention.requested", "", `{"options":[{"id":3,"label":"SECRET"},{"id":"x"},{"label":"SECRET"},"SECRET",{"id":true,"label":"SECRET"}]}`,
			`{"options":[{"id":3,"label":"3"},{"id":"x","label":"x"},{},{"id":true}]}`},
		{"options that are not an array are removed", "attention.requested", "", `{"options":"SECRET","kind":"permission"}`, `{"kind":"permission"}`},
		{"fields: labels and choice labels from ids; choices not an array removed", "attention.requested", "", `{"fields":[{"id":"f","type":"select","label":"SECRET","choices":[{"id":"1","label":"SECRET"}]},{"id":"g","label":"SECRET","choices":"SECRET"}]}`,
			`{"fields":[{"id":"f","type":"select","label":"f","choices":[{"id":"1","label":"1"}]},{"id":"g","label":"g"}]}`},
		{"context (full) removed", "attention.requested", "", `{"kind":"review","context":{"diff":"SECRET"}}`, `{"kind":"review"}`},
		{"values: numbers and booleans only; values not an object removed", "attention.answered", "", `{"answer":{"values":{"a":-1.5e3,"b":false,"c":"SECRET","d":["1"],"e":null,"f":{"x":1}}}}`, `{"answer":{"values":{"a":-1.5e3,"b":false}}}`},
		{"values as a string removed", "attention.answered", "", `{"answer":{"option":"1","values":"SECRET"}}`, `{"answer":{"option":"1"}}`},
		{"answer as a string removed", "attention.answered", "", `{"answer":"SECRET","via":"oob"}`, `{"via":"oob"}`},
		{"citation source uri/title removed at depth", "resource.citation.recorded", "", `{"citations":[{"source":{"id":"d","uri":"SECRET","title":"SECRET"},"cited_text":"SECRET","document_index":0}]}`, `{"citations":[{"source":{"id":"d"},"document_index":0}]}`},
		{"schema without properties: data removed", "control.pause", "", `{"why":"SECRET"}`, ``},
		{"unknown core type: data removed", "session.renamed", "", `{"title":"SECRET"}`, ``},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := []byte(ev(c.typ, c.subject, c.data))
			if c.typ == "control.pause" {
				in = bytes.Replace(in, []byte(`,"seq":1`), nil, 1)
			}
			out, changed, err := Downlevel(in, CaptureMetadata, Limits{})
			if err != nil || !changed {
				t.Fatalf("changed=%v err=%v", changed, err)
			}
			_, vals := topMembers(t, out)
			if c.want == "" {
				if _, ok := vals["data"]; ok {
					t.Errorf("data kept: %s", out)
				}
				return
			}
			i := bytes.Index(out, []byte(`"data":`))
			if i < 0 {
				t.Fatalf("no data: %s", out)
			}
			if got := out[i+7 : len(out)-1]; string(got) != c.want {
				t.Errorf("\n got %s\nwant %s", got, c.want)
			}
			if bytes.Contains(out, []byte("SECRET")) {
				t.Errorf("leak: %s", out)
			}
			if !json.Valid(out) {
				t.Errorf("invalid JSON: %s", out)
			}
		})
	}
}

func TestDownlevelErrors(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		ceiling Capture
		kind    Kind
		field   string
	}{
		{"zero ceiling", `{` + env + `}`, 0, KindInvalid, "capture"},
		{"ceiling out of range", `{` + env + `}`, 7, KindInvalid, "capture"},
		{"malformed", `{` + env, CaptureNone, KindSyntax, ""},
		{"trailing data", `{` + env + `} {}`, CaptureNone, KindSyntax, ""},
		{"not an object", `[1]`, CaptureNone, KindSyntax, ""},
		{"over the size limit", `{` + env + `,"data":{"x":"` + strings.Repeat("a", 2000) + `"}}`, CaptureNone, KindLimit, ""},
		{"capture not a level", `{` + env + `,"capture":"secret"}`, CaptureFull, KindInvalid, "capture"},
		{"capture not a string", `{` + env + `,"capture":3}`, CaptureFull, KindInvalid, "capture"},
		{"no version attribute", `{"id":"x"}`, CaptureNone, KindDialect, "aep"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, changed, err := Downlevel([]byte(c.in), c.ceiling, Limits{MaxEventBytes: 1024})
			e := AsError(err)
			if e == nil || e.Kind != c.kind || e.Field != c.field || e.Dialect != DialectR || out != nil || changed {
				t.Fatalf("out=%q changed=%v err=%#v", out, changed, e)
			}
			if _, ok := LookupCode(DialectR, e.Code); !ok {
				t.Errorf("code %q not in the R vocabulary", e.Code)
			}
		})
	}
	// A dialect D event has no capture levels: returned as is.
	d := []byte(`{"aep_version":"0.1","id":"evt_1","type":"task.progress","source":"tool:x","created_at":"2026-07-09T10:00:10Z","payload":{"secret":"x"}}`)
	if out, changed, err := Downlevel(d, CaptureNone, Limits{}); err != nil || changed || &out[0] != &d[0] {
		t.Errorf("D event: changed=%v err=%v", changed, err)
	}
}

// loadAnnotations returns the schema annotations of testdata, the
// independent reference for the fuzz targets' leak check.
func loadAnnotations(tb testing.TB) map[string]map[string]string {
	var f struct{ Types map[string]map[string]string }
	readJSON(tb, "testdata/r-capture-annotations.json", &f)
	return f.Types
}

// leakPath returns the dotted path (run.py's convention) of a member in v
// whose annotation is above target, or "".
func leakPath(ann map[string]string, v any, path string, target Capture) string {
	switch x := v.(type) {
	case map[string]any:
		for k, m := range x {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if lvl, ok := ParseCapture(ann[p]); ok && lvl > target {
				return p
			}
			if l := leakPath(ann, m, p, target); l != "" {
				return l
			}
		}
	case []any:
		for _, m := range x {
			if l := leakPath(ann, m, path+"[]", target); l != "" {
				return l
			}
		}
	}
	return ""
}

// checkDownlevel is the property every Downlevel call must have: no panic;
// an error returns nothing; the output is valid JSON; an unchanged event is
// raw itself; a changed valid R event is still a valid R event with the same
// routing attributes, at a level at or below both the ceiling and its own,
// never redacted from full, with no member annotated above that level and
// no data at all for an unannotated type or at none; and a second pass at
// the same ceiling changes nothing.
func checkDownlevel(t *testing.T, ann map[string]map[string]string, raw []byte, ceiling Capture) {
	out, changed, err := Downlevel(raw, ceiling, Limits{})
	if err != nil {
		if out != nil || changed || AsError(err) == nil {
			t.Fatalf("error %v with out=%q changed=%v", err, out, changed)
		}
		if ceiling.Valid() && Detect(raw) == DialectR {
			if _, perr := Parse(raw, Limits{}); perr == nil {
				t.Fatalf("valid R event refused: %v", err)
			}
		}
		return
	}
	if !json.Valid(out) {
		t.Fatalf("invalid JSON out of %q:\n%q", raw, out)
	}
	if !changed {
		if len(raw) > 0 && &out[0] != &raw[0] || len(out) != len(raw) {
			t.Fatal("unchanged output is not raw")
		}
	}
	again, ch, err := Downlevel(out, ceiling, Limits{})
	if err != nil || ch || !bytes.Equal(again, out) {
		t.Fatalf("not idempotent: changed=%v err=%v\n%s", ch, err, out)
	}
	a, err := Parse(raw, Limits{})
	if err != nil || a.Dialect != DialectR {
		return
	}
	b, err := Parse(out, Limits{})
	if err != nil {
		t.Fatalf("valid event became invalid: %v\n in %s\nout %s", err, raw, out)
	}
	level, got := EventCapture(&a), EventCapture(&b)
	if got > ceiling && changed || got > level || (level == CaptureFull && got == CaptureRedacted) || changed != (level > ceiling) {
		t.Fatalf("levels: in %s, ceiling %s, out %s, changed %v", level, ceiling, got, changed)
	}
	a.Capture, b.Capture = "", ""
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("routing attributes changed:\n%+v\n%+v", a, b)
	}
	if !changed {
		return
	}
	var ev struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(out, &ev); err != nil {
		t.Fatal(err)
	}
	types, has := ann[a.Type]
	if ev.Data != nil && (got == CaptureNone || !has || len(types) == 0) {
		t.Fatalf("data kept at %s for type %q:\n%s", got, a.Type, out)
	}
	if ev.Data != nil {
		var data any
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatal(err)
		}
		if p := leakPath(types, data, "", got); p != "" {
			t.Fatalf("%s kept at %s:\n%s", p, got, out)
		}
		if got < CaptureRedacted {
			if p := metadataStarLeak(&b, data); p != "" {
				t.Fatalf("%s not degraded at %s:\n%s", p, got, out)
			}
		}
	}
}

// metadataStarLeak checks the AEP-0002 §5.3 [metadata*] fields of data below
// redacted: the prompt is the synthesized one, every label equals its
// element's id, answer.values holds only numbers and booleans. It returns
// the offending path or "".
func metadataStarLeak(a *Attrs, data any) string {
	d, _ := data.(map[string]any)
	switch a.Type {
	case "attention.requested":
		if p, ok := d["prompt"]; ok {
			kind, ok := d["kind"].(string)
			if !ok {
				kind = "attention"
			}
			want := a.Agent + " requests " + kind
			if a.Subject != "" {
				want += ": " + a.Subject
			}
			if p != want {
				return "prompt"
			}
		}
		labels := func(v any, path string) string {
			arr, _ := v.([]any)
			for _, e := range arr {
				o, ok := e.(map[string]any)
				if !ok {
					return path + "[]"
				}
				if l, ok := o["label"]; ok {
					switch id := o["id"].(type) {
					case string:
						if l != id {
							return path + "[].label"
						}
					case float64:
						if _, ok := l.(string); !ok {
							return path + "[].label"
						}
					default:
						return path + "[].label"
					}
				}
			}
			return ""
		}
		if l := labels(d["options"], "options"); l != "" {
			return l
		}
		if l := labels(d["fields"], "fields"); l != "" {
			return l
		}
		fs, _ := d["fields"].([]any)
		for _, f := range fs {
			if c, ok := f.(map[string]any)["choices"]; ok {
				if _, ok := c.([]any); !ok {
					return "fields[].choices"
				}
				if l := labels(c, "fields[].choices"); l != "" {
					return l
				}
			}
		}
	case "attention.answered", "control.attention.respond":
		ans, ok := d["answer"].(map[string]any)
		if !ok {
			if _, has := d["answer"]; has {
				return "answer"
			}
			return ""
		}
		if v, has := ans["values"]; has {
			m, ok := v.(map[string]any)
			if !ok {
				return "answer.values"
			}
			for k, x := range m {
				switch x.(type) {
				case bool, float64:
				default:
					return "answer.values." + k
				}
			}
		}
	}
	return ""
}

func fuzzSeeds(f *testing.F) {
	for _, c := range downlevelCases(f) {
		f.Add([]byte(c.Event), uint8(mustCapture(f, c.Ceiling)))
	}
	f.Add([]byte(`{`+env+`,"capture":"full","\u0064ata":{"res\u0075lt":"x","result":1}}`), uint8(CaptureMetadata))
	f.Add([]byte(`{"aep_version":"0.1","id":"e","type":"t.x","source":"s","created_at":"2026-07-09T10:00:10Z"}`), uint8(CaptureNone))
	f.Add([]byte(`{ "data" : {} , `+env+` }`), uint8(CaptureNone))
}

// FuzzDownlevel: checkDownlevel on arbitrary bytes and ceilings (including
// the invalid 0 and 5), seeded with the fixture events.
func FuzzDownlevel(f *testing.F) {
	fuzzSeeds(f)
	ann := loadAnnotations(f)
	f.Fuzz(func(t *testing.T, raw []byte, ceiling uint8) {
		checkDownlevel(t, ann, raw, Capture(ceiling%6))
	})
}

// FuzzDownlevelData splices fuzzed data into a valid envelope of an
// annotated type, so that the pruning walk, not the envelope scan, is what
// gets explored.
func FuzzDownlevelData(f *testing.F) {
	ann := loadAnnotations(f)
	types := make([]string, 0, len(gateTypes))
	for typ := range gateTypes {
		types = append(types, typ)
	}
	sort.Strings(types)
	for _, c := range downlevelCases(f) {
		var ev struct {
			Type string
			Data json.RawMessage
		}
		if json.Unmarshal(c.Event, &ev) == nil && ev.Data != nil {
			f.Add(uint8(slices.Index(types, ev.Type)+1), uint8(CaptureFull), uint8(CaptureMetadata), []byte(ev.Data))
		}
	}
	f.Add(uint8(0), uint8(CaptureFull), uint8(CaptureMetadata), []byte(`{"a":[{"b":"c"}]}`))
	f.Fuzz(func(t *testing.T, typ, level, ceiling uint8, data []byte) {
		tn := "x.acme.tool.blob"
		if i := int(typ) % (len(types) + 1); i > 0 {
			tn = types[i-1]
		}
		seq := `,"seq":1`
		if isForeignEmitterR([]byte(tn)) {
			seq = ""
		}
		raw := []byte(`{"aep":"0.1","id":"F1","type":"` + tn + `","subject":"S","time":"2026-07-03T10:00:00Z","source":"aep://h/agent/a","agent":"a","session":"s1"` + seq +
			`,"capture":"` + Capture(level%4+1).String() + `","data":` + string(data) + `}`)
		if strings.HasPrefix(tn, "agent.") {
			raw = bytes.Replace(raw, []byte(`,"session":"s1"`+seq), nil, 1)
		}
		checkDownlevel(t, ann, raw, Capture(ceiling%4+1))
	})
}

// downlevelBenchEvents are full-capture tool.completed events of about 600 B
// and 4 KiB (result and result_redacted carry the bulk, as real tool output
// does), and a redacted kind:"form" attention.requested.
func downlevelBenchEvents(tb testing.TB) []struct {
	name string
	raw  []byte
} {
	tool := func(size int) []byte {
		var sb strings.Builder
		for i := 0; sb.Len() < (size-560)/2; i++ {
			sb.WriteString(`,"line` + strconv.Itoa(i) + `":"ok src/pkg/file` + strconv.Itoa(i) + `.go r\u00e9sum\u00e9"`)
		}
		res := `{"exit":0` + sb.String() + `}`
		return []byte(`{"aep":"0.1","id":"01JX9YB3P4T9","type":"tool.completed","subject":"Bash","time":"2026-07-03T10:15:04.221Z",` +
			`"source":"aep://host-a/agent/claude-code/session/s_8f2c","agent":"claude-code","session":"s_8f2c","run":"r_0042",` +
			`"step":"turn-3","seq":187,"epoch":0,"cause":"01JX9YB2Z1QK","severity":"info","capture":"full","acmeregion":"eu-1",` +
			`"data":{"tool":{"name":"Bash","call_id":"t_91"},"status":"success","duration_ms":1240,"result_digest":"a3f9c2d1e8b7a6f5a3f9c2d1e8b7a6f5",` +
			`"result":` + res + `,"result_redacted":` + res + `,"gen_ai.usage.input_tokens":142,"gen_ai.usage.output_tokens":87}}`)
	}
	form := []byte(`{"aep":"0.1","id":"DL3","type":"attention.requested","subject":"AskUserQuestion","time":"2026-07-03T10:00:02Z",` +
		`"source":"aep://h/agent/claude-code","agent":"claude-code","session":"s1","seq":1,"capture":"redacted",` +
		`"data":{"kind":"form","prompt":"Database: Which database should the new service use?","fields":[{"id":"1","type":"select",` +
		`"label":"Database: Which database should the new service use?","required":true,"other":true,"choices":[{"id":"1","label":"PostgreSQL"},` +
		`{"id":"2","label":"SQLite"}]},{"id":"2","type":"string","label":"Service name"}],"options":[{"id":"allow","label":"Allow"},{"id":"deny","label":"Deny"}],"respond_via":["control"]}}`)
	evs := []struct {
		name string
		raw  []byte
	}{{"tool-600B", tool(600)}, {"tool-4KiB", tool(4096)}, {"form-redacted", form}}
	for _, e := range evs {
		if _, err := Parse(e.raw, Limits{}); err != nil {
			tb.Fatalf("%s: %v", e.name, err)
		}
	}
	return evs
}

// BenchmarkDownlevel measures Downlevel to a metadata ceiling (the common
// down-level), the unchanged path (ceiling at the event's level: one scan,
// no allocation of output), and as the baseline json.Unmarshal into
// map[string]any plus json.Marshal of the same event: the least a
// map-based down-leveler does before removing anything.
func BenchmarkDownlevel(b *testing.B) {
	for _, ev := range downlevelBenchEvents(b) {
		b.Run(ev.name+"/Downlevel-metadata", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(ev.raw)))
			for b.Loop() {
				if _, ch, err := Downlevel(ev.raw, CaptureMetadata, Limits{}); err != nil || !ch {
					b.Fatal(err)
				}
			}
		})
		b.Run(ev.name+"/Downlevel-unchanged", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(ev.raw)))
			for b.Loop() {
				if _, ch, err := Downlevel(ev.raw, CaptureFull, Limits{}); err != nil || ch {
					b.Fatal(err)
				}
			}
		})
		b.Run(ev.name+"/json.Unmarshal+Marshal", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(ev.raw)))
			for b.Loop() {
				var m map[string]any
				if err := json.Unmarshal(ev.raw, &m); err != nil {
					b.Fatal(err)
				}
				if _, err := json.Marshal(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// refDownlevel is a slow reference for well-shaped events, written from the
// spec text on decoded values with the path annotations of testdata (the
// conformance runner's conventions): prune by path, degrade the [metadata*]
// fields below redacted, strip unannotated types.
func refDownlevel(ev map[string]any, ceiling Capture, ann map[string]map[string]string) map[string]any {
	level := DefaultCapture
	if s, ok := ev["capture"].(string); ok {
		level, _ = ParseCapture(s)
	}
	if level <= ceiling {
		return ev
	}
	target := ceiling
	if ceiling == CaptureRedacted && level == CaptureFull {
		target = CaptureMetadata
	}
	out := map[string]any{}
	for k, v := range ev {
		out[k] = v
	}
	out["capture"] = target.String()
	typ, _ := ev["type"].(string)
	a := ann[typ]
	data, ok := ev["data"].(map[string]any)
	if target == CaptureNone || len(a) == 0 || !ok {
		delete(out, "data")
		return out
	}
	var prune func(v any, path string) any
	prune = func(v any, path string) any {
		switch x := v.(type) {
		case []any:
			r := make([]any, 0, len(x))
			for _, e := range x {
				r = append(r, prune(e, path+"[]"))
			}
			return r
		case map[string]any:
			r := map[string]any{}
			for k, e := range x {
				p := k
				if path != "" {
					p = path + "." + k
				}
				if l, ok := ParseCapture(a[p]); ok && l > target {
					continue
				}
				r[k] = prune(e, p)
			}
			return r
		}
		return v
	}
	d := prune(data, "").(map[string]any)
	if target < CaptureRedacted {
		relabel := func(v any) any {
			arr, ok := v.([]any)
			if !ok {
				return v
			}
			for _, e := range arr {
				if o, ok := e.(map[string]any); ok {
					if id, ok := o["id"].(string); ok {
						o["label"] = id
					}
				}
			}
			return arr
		}
		switch typ {
		case "attention.requested":
			if _, ok := d["prompt"]; ok {
				kind, ok := d["kind"].(string)
				if !ok {
					kind = "attention"
				}
				p := ev["agent"].(string) + " requests " + kind
				if s, ok := ev["subject"].(string); ok {
					p += ": " + s
				}
				d["prompt"] = p
			}
			if o, ok := d["options"]; ok {
				d["options"] = relabel(o)
			}
			if fs, ok := d["fields"].([]any); ok {
				relabel(fs)
				for _, f := range fs {
					if fo, ok := f.(map[string]any); ok {
						if c, ok := fo["choices"]; ok {
							fo["choices"] = relabel(c)
						}
					}
				}
			}
		case "attention.answered", "control.attention.respond":
			if ans, ok := d["answer"].(map[string]any); ok {
				if vals, ok := ans["values"].(map[string]any); ok {
					for k, v := range vals {
						if _, num := v.(json.Number); !num {
							if _, b := v.(bool); !b {
								delete(vals, k)
							}
						}
					}
				}
			}
		}
	}
	out["data"] = d
	return out
}

// TestDownlevelReference compares Downlevel with refDownlevel on every R
// golden event and every downlevel fixture event, each at its own capture
// and re-declared at every level, down-leveled to every ceiling.
func TestDownlevelReference(t *testing.T) {
	ann := loadAnnotations(t)
	raws := readLines(t, "testdata/r-golden.jsonl")
	for _, c := range downlevelCases(t) {
		raws = append(raws, []byte(c.Event))
	}
	n := 0
	for _, raw := range raws {
		if _, err := Parse(raw, Limits{}); err != nil {
			continue // the golden file also holds events for other checks
		}
		variants := [][]byte{raw}
		for lvl := CaptureNone; lvl <= CaptureFull; lvl++ {
			m := decodeAny(t, raw).(map[string]any)
			m["capture"] = lvl.String()
			variants = append(variants, mustMarshal(m))
		}
		for _, in := range variants {
			for ceiling := CaptureNone; ceiling <= CaptureFull; ceiling++ {
				out, _, err := Downlevel(in, ceiling, Limits{})
				if err != nil {
					t.Fatalf("%v: %s", err, in)
				}
				want := refDownlevel(decodeAny(t, in).(map[string]any), ceiling, ann)
				if got := decodeAny(t, out); !reflect.DeepEqual(got, want) {
					t.Errorf("at %s:\n  in %s\n got %s\nwant %s", ceiling, in, out, mustMarshal(want))
				}
				n++
			}
		}
	}
	if n < 1000 {
		t.Fatalf("only %d comparisons", n)
	}
	t.Logf("%d comparisons", n)
}
