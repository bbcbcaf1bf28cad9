package filtering

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/aep-gateway/aep-gateway/aep"
)

// TestRConformance runs the R conformance corpus (testdata/README.md).
func TestRConformance(t *testing.T) {
	raw, err := os.ReadFile("testdata/attr-match-cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var corpus struct {
		Match []struct {
			Name   string          `json:"name"`
			Filter json.RawMessage `json:"filter"`
			Event  json.RawMessage `json:"event"`
			Match  bool            `json:"match"`
		} `json:"match"`
		Invalid []struct {
			Name   string          `json:"name"`
			Filter json.RawMessage `json:"filter"`
		} `json:"invalid"`
	}
	if err := json.Unmarshal(raw, &corpus); err != nil {
		t.Fatal(err)
	}
	if len(corpus.Match) == 0 || len(corpus.Invalid) == 0 {
		t.Fatal("empty corpus")
	}
	for _, c := range corpus.Match {
		t.Run("match/"+c.Name, func(t *testing.T) {
			f := mustR(t, string(c.Filter))
			if got := f.Match(rAttrs(t, string(c.Event))); got != c.Match {
				t.Fatalf("filter %s event %s: got %v want %v", c.Filter, c.Event, got, c.Match)
			}
		})
	}
	for _, c := range corpus.Invalid {
		t.Run("invalid/"+c.Name, func(t *testing.T) {
			_, err := ParseR(c.Filter)
			_ = filterErr(t, err, aep.DialectR, CodeInvalidFilter)
		})
	}
}

func TestRMatch(t *testing.T) {
	cases := []struct {
		name, filter, event string
		want                bool
	}{
		// Empty filter and dialect.
		{"empty filter matches all", `{}`, `{"type":"agent.heartbeat"}`, true},
		{"empty filter matches typeless", `{}`, `{}`, true},
		// Type.
		{"exact type", `{"type":"tool.completed"}`, `{"type":"tool.completed"}`, true},
		{"exact type is not a prefix", `{"type":"tool.completed"}`, `{"type":"tool.completed.x"}`, false},
		{"prefix strict: not the bare prefix", `{"type":"attention.*"}`, `{"type":"attention"}`, false},
		{"prefix strict: trailing dot alone", `{"type":"attention.*"}`, `{"type":"attention."}`, false},
		{"prefix many segments", `{"type":"attention.*"}`, `{"type":"attention.a.b.c"}`, true},
		{"prefix is dot-bounded", `{"type":"tool.*"}`, `{"type":"toolkit.used"}`, false},
		{"type any-of mixed", `{"type":["run.started","tool.*"]}`, `{"type":"tool.failed"}`, true},
		{"type any-of overlapping", `{"type":["tool.*","tool.failed"]}`, `{"type":"tool.failed"}`, true},
		{"type case-sensitive", `{"type":"tool.completed"}`, `{"type":"Tool.completed"}`, false},
		{"type integer never equals", `{"type":5}`, `{"type":"5"}`, false},
		{"absent type", `{"type":"tool.*"}`, `{}`, false},
		// Strings.
		{"session equality", `{"session":"s1"}`, `{"session":"s1"}`, true},
		{"session any-of", `{"session":["s0","s1"]}`, `{"session":"s1"}`, true},
		{"session absent", `{"session":"s1"}`, `{"type":"agent.health"}`, false},
		{"no coercion: 5 vs \"5\"", `{"session":5}`, `{"session":"5"}`, false},
		{"no coercion: true vs \"true\"", `{"agent":true}`, `{"agent":"true"}`, false},
		{"string and integer alts", `{"session":[5,"5"]}`, `{"session":"5"}`, true},
		{"unicode exact", `{"subject":"caf\u00e9 ☕"}`, `{"subject":"café ☕"}`, true},
		{"unicode not normalized", `{"subject":"caf\u00e9"}`, `{"subject":"cafe\u0301"}`, false},
		{"id", `{"id":"01J"}`, `{"id":"01J"}`, true},
		{"run and step", `{"run":"r1","step":"t3"}`, `{"run":"r1","step":"t3"}`, true},
		{"run and step one misses", `{"run":"r1","step":"t3"}`, `{"run":"r1","step":"t4"}`, false},
		{"source", `{"source":"aep://h/agent/a"}`, `{"source":"aep://h/agent/a"}`, true},
		// Cause (AEP-0003 §6.2): the id of the causing event, exact only.
		{"cause exact", `{"cause":"01JX9YB4RQ"}`, `{"cause":"01JX9YB4RQ"}`, true},
		{"cause exact misses", `{"cause":"01JX9YB4RQ"}`, `{"cause":"01JX9YB4RR"}`, false},
		{"cause any-of", `{"cause":["01JA","01JX9YB4RQ"]}`, `{"cause":"01JX9YB4RQ"}`, true},
		{"cause any-of misses", `{"cause":["01JA","01JB"]}`, `{"cause":"01JC"}`, false},
		{"cause absent", `{"cause":"01JX9YB4RQ"}`, `{"type":"run.started"}`, false},
		{"cause is not id", `{"cause":"01JX9YB4RQ"}`, `{"id":"01JX9YB4RQ"}`, false},
		{"cause integer never equals", `{"cause":5}`, `{"cause":"5"}`, false},
		{"cause with type", `{"type":"attention.*","cause":"01JQ"}`, `{"type":"attention.answered","cause":"01JQ"}`, true},
		// Epoch.
		{"epoch default 0", `{"epoch":0}`, `{}`, true},
		{"epoch default is not 1", `{"epoch":1}`, `{}`, false},
		{"epoch explicit", `{"epoch":[2,3]}`, `{"epoch":3}`, true},
		{"epoch 3.0 is 3", `{"epoch":3.0}`, `{"epoch":3}`, true},
		{"epoch string never equals", `{"epoch":"0"}`, `{}`, false},
		// Severity.
		{"severity default info equality", `{"severity":"info"}`, `{}`, true},
		{"severity value", `{"severity":"error"}`, `{"severity":"error"}`, true},
		{"severity value misses", `{"severity":"error"}`, `{"severity":"critical"}`, false},
		{"severity any-of", `{"severity":["error","critical"]}`, `{"severity":"critical"}`, true},
		{"severity gte inclusive", `{"severity":{"gte":"warning"}}`, `{"severity":"warning"}`, true},
		{"severity gte below", `{"severity":{"gte":"warning"}}`, `{"severity":"notice"}`, false},
		{"severity lte inclusive", `{"severity":{"lte":"notice"}}`, `{"severity":"notice"}`, true},
		{"severity lte above", `{"severity":{"lte":"notice"}}`, `{"severity":"warning"}`, false},
		{"severity lte default info", `{"severity":{"lte":"info"}}`, `{}`, true},
		{"severity band", `{"severity":{"gte":"notice","lte":"error"}}`, `{"severity":"error"}`, true},
		{"severity band above", `{"severity":{"gte":"notice","lte":"error"}}`, `{"severity":"critical"}`, false},
		{"severity single-level band", `{"severity":{"gte":"debug","lte":"debug"}}`, `{"severity":"debug"}`, true},
		{"event severity outside registry", `{"severity":{"gte":"debug"}}`, `{"severity":"loud"}`, false},
		// Capture.
		{"capture default metadata", `{"capture":"metadata"}`, `{}`, true},
		{"capture default is not full", `{"capture":"full"}`, `{}`, false},
		{"capture any-of", `{"capture":["redacted","full"]}`, `{"capture":"full"}`, true},
		// Extensions.
		{"ext string", `{"acmeregion":"eu-1"}`, `{"acmeregion":"eu-1"}`, true},
		{"ext string escaped in event", `{"acmeregion":"eu-1"}`, `{"acmeregion":"eu\u002d1"}`, true},
		{"ext string escaped in filter", `{"acmeregion":"eu\u002d1"}`, `{"acmeregion":"eu-1"}`, true},
		{"ext surrogate pair", `{"acmeemoji":"\ud83d\ude00"}`, `{"acmeemoji":"😀"}`, true},
		{"ext string vs int", `{"acmen":"5"}`, `{"acmen":5}`, false},
		{"ext int vs string", `{"acmen":5}`, `{"acmen":"5"}`, false},
		{"ext int", `{"acmen":5}`, `{"acmen":5}`, true},
		{"ext int canonical 5.0", `{"acmen":5}`, `{"acmen":5.0}`, true},
		{"ext int canonical 50e-1", `{"acmen":5}`, `{"acmen":50e-1}`, true},
		{"ext int negative zero", `{"acmen":0}`, `{"acmen":-0}`, true},
		{"ext fraction never equals", `{"acmen":5}`, `{"acmen":5.5}`, false},
		{"ext int64 max", `{"acmen":9223372036854775807}`, `{"acmen":9223372036854775807}`, true},
		{"ext int out of range", `{"acmen":9223372036854775807}`, `{"acmen":9223372036854775808}`, false},
		{"ext bool", `{"acmeflag":true}`, `{"acmeflag":true}`, true},
		{"ext bool vs 1", `{"acmeflag":true}`, `{"acmeflag":1}`, false},
		{"ext null", `{"acmeflag":false}`, `{"acmeflag":null}`, false},
		{"ext object", `{"acmeflag":false}`, `{"acmeflag":{"a":false}}`, false},
		{"ext empty string", `{"acmeregion":""}`, `{"acmeregion":""}`, true},
		{"ext absent", `{"acmeregion":"eu-1"}`, `{"type":"x"}`, false},
		{"ext any-of", `{"acmeregion":["us-1",7,"eu-1"]}`, `{"acmeregion":"eu-1"}`, true},
		// Conjunction.
		{"conjunction", `{"type":"tool.*","agent":"codex","severity":{"gte":"warning"},"acmen":1}`,
			`{"type":"tool.failed","agent":"codex","severity":"error","acmen":1}`, true},
		{"conjunction one misses", `{"type":"tool.*","agent":"codex","severity":{"gte":"warning"},"acmen":1}`,
			`{"type":"tool.failed","agent":"codex","severity":"error","acmen":2}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := mustR(t, c.filter)
			a := rAttrs(t, c.event)
			if got := f.Match(a); got != c.want {
				t.Fatalf("filter %s event %s: got %v want %v", c.filter, c.event, got, c.want)
			}
			// A dialect R filter never matches a D event.
			a.Dialect = aep.DialectD
			if f.Match(a) {
				t.Fatalf("filter %s matched a dialect D event", c.filter)
			}
		})
	}
}

func TestRReject(t *testing.T) {
	long := strings.Repeat("a", DefaultLimits.MaxValueLen+1)
	many := "[" + strings.TrimSuffix(strings.Repeat(`"x",`, DefaultLimits.MaxValues+1), ",") + "]"
	var manyDistinct strings.Builder
	manyDistinct.WriteString("[")
	for i := 0; i <= DefaultLimits.MaxValues; i++ {
		if i > 0 {
			manyDistinct.WriteString(",")
		}
		manyDistinct.WriteString(`"v` + itoa(i) + `"`)
	}
	manyDistinct.WriteString("]")
	var members strings.Builder
	members.WriteString("{")
	for i := 0; i <= DefaultLimits.MaxMembers; i++ {
		if i > 0 {
			members.WriteString(",")
		}
		members.WriteString(`"x` + itoa(i) + `":1`)
	}
	members.WriteString("}")
	deepType := `{"type":"` + strings.Repeat("a.", DefaultLimits.MaxSegments) + `*"}`
	cases := []struct {
		name, filter, code, field string
	}{
		{"not an object", `[]`, CodeInvalidFilter, ""},
		{"null", `null`, CodeInvalidFilter, ""},
		{"not JSON", `{"type":`, CodeInvalidFilter, ""},
		{"trailing data", `{} {}`, CodeInvalidFilter, ""},
		{"empty input", ``, CodeInvalidFilter, ""},
		{"invalid UTF-8", "{\"session\":\"\xff\"}", CodeInvalidFilter, ""},
		{"duplicate key", `{"session":"a","session":"b"}`, CodeInvalidFilter, ""},
		{"seq", `{"seq":5}`, CodeInvalidFilter, "seq"},
		{"time", `{"time":"x"}`, CodeInvalidFilter, "time"},
		{"aep", `{"aep":"0.1"}`, CodeInvalidFilter, "aep"},
		{"traceparent", `{"traceparent":"00-x"}`, CodeInvalidFilter, "traceparent"},
		{"data", `{"data":{}}`, CodeInvalidFilter, "data"},
		{"cause empty string", `{"cause":""}`, CodeInvalidFilter, "cause"},
		{"cause glob", `{"cause":"01J*"}`, CodeInvalidFilter, "cause"},
		{"cause object", `{"cause":{"gte":"01J"}}`, CodeInvalidFilter, "cause"},
		{"uppercase key", `{"NotAnAttr":"y"}`, CodeInvalidFilter, "NotAnAttr"},
		{"dashed key", `{"acme-region":"y"}`, CodeInvalidFilter, "acme-region"},
		{"ext name 21 chars", `{"abcdefghijklmnopqrstu":"y"}`, CodeInvalidFilter, "abcdefghijklmnopqrstu"},
		{"empty key", `{"":"y"}`, CodeInvalidFilter, ""},
		{"bare star", `{"type":"*"}`, CodeInvalidFilter, "type"},
		{"bare star in array", `{"type":["tool.*","*"]}`, CodeInvalidFilter, "type"},
		{"inner wildcard", `{"type":"tool.*.progress"}`, CodeInvalidFilter, "type"},
		{"partial segment wildcard", `{"type":"tool*"}`, CodeInvalidFilter, "type"},
		{"partial segment wildcard 2", `{"type":"tool.c*"}`, CodeInvalidFilter, "type"},
		{"double star", `{"type":"tool.**"}`, CodeInvalidFilter, "type"},
		{"star dot", `{"type":".*"}`, CodeInvalidFilter, "type"},
		{"uppercase prefix", `{"type":"Tool.*"}`, CodeInvalidFilter, "type"},
		{"empty prefix segment", `{"type":"a..*"}`, CodeInvalidFilter, "type"},
		{"empty type", `{"type":""}`, CodeInvalidFilter, "type"},
		{"glob on agent", `{"agent":"claude*"}`, CodeInvalidFilter, "agent"},
		{"glob on ext", `{"acmeregion":"eu-*"}`, CodeInvalidFilter, "acmeregion"},
		{"empty array", `{"agent":[]}`, CodeInvalidFilter, "agent"},
		{"empty type array", `{"type":[]}`, CodeInvalidFilter, "type"},
		{"null value", `{"agent":null}`, CodeInvalidFilter, "agent"},
		{"null in array", `{"agent":["a",null]}`, CodeInvalidFilter, "agent"},
		{"nested array", `{"agent":[["a"]]}`, CodeInvalidFilter, "agent"},
		{"object value", `{"agent":{"eq":"a"}}`, CodeInvalidFilter, "agent"},
		{"fraction", `{"epoch":1.5}`, CodeInvalidFilter, "epoch"},
		{"huge integer", `{"epoch":9223372036854775808}`, CodeInvalidFilter, "epoch"},
		{"ext fraction", `{"acmen":0.1}`, CodeInvalidFilter, "acmen"},
		{"empty string session", `{"session":""}`, CodeInvalidFilter, "session"},
		{"severity gt", `{"severity":{"gt":"info"}}`, CodeInvalidFilter, "severity"},
		{"severity empty cmp", `{"severity":{}}`, CodeInvalidFilter, "severity"},
		{"severity unknown level", `{"severity":"loud"}`, CodeInvalidFilter, "severity"},
		{"severity unknown bound", `{"severity":{"gte":"loud"}}`, CodeInvalidFilter, "severity"},
		{"severity integer", `{"severity":3}`, CodeInvalidFilter, "severity"},
		{"severity case", `{"severity":"Info"}`, CodeInvalidFilter, "severity"},
		{"severity empty range", `{"severity":{"gte":"error","lte":"info"}}`, CodeInvalidFilter, "severity"},
		{"severity cmp in array", `{"severity":[{"gte":"info"}]}`, CodeInvalidFilter, "severity"},
		{"capture range", `{"capture":{"gte":"none"}}`, CodeInvalidFilter, "capture"},
		{"capture unknown", `{"capture":"all"}`, CodeInvalidFilter, "capture"},
		{"value too long", `{"session":"` + long + `"}`, CodeLimitExceeded, "session"},
		{"too many values", `{"session":` + manyDistinct.String() + `}`, CodeLimitExceeded, "session"},
		{"too many values before dedupe", `{"session":` + many + `}`, CodeLimitExceeded, "session"},
		{"too many members", members.String(), CodeLimitExceeded, ""},
		{"too many segments", deepType, CodeLimitExceeded, "type"},
		{"too deep", `{"a":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, CodeInvalidFilter, ""},
		{"too big", `{"session":"` + strings.Repeat("a", DefaultLimits.MaxBytes) + `"}`, CodeLimitExceeded, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := ParseR([]byte(c.filter))
			if err == nil {
				t.Fatalf("ParseR(%.80s) accepted: %s", c.filter, f)
			}
			fe := filterErr(t, err, aep.DialectR, c.code)
			if fe.Field != c.field {
				t.Fatalf("field %q, want %q (%v)", fe.Field, c.field, err)
			}
		})
	}
}

func TestRNormalized(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{}`, `{}`},
		{`{"type":"tool.*","session":["a","a","b"]}`, `{"type":["tool.*"],"session":["a","b"]}`},
		{`{"cause":["c1","c1","c2"]}`, `{"cause":["c1","c2"]}`},
		{`{"epoch":3.0,"acmeflag":[true,true,1e1]}`, `{"epoch":[3],"acmeflag":[true,10]}`},
		{`{"severity":{"gte":"notice"}}`, `{"severity":{"gte":"notice"}}`},
		{`{"severity":"info","capture":["none"]}`, `{"severity":["info"],"capture":["none"]}`},
	}
	for _, c := range cases {
		f := mustR(t, c.in)
		if got := f.String(); got != c.want {
			t.Errorf("%s normalized to %s, want %s", c.in, got, c.want)
		}
		// The normalized form parses to the same normal form.
		if again := mustR(t, f.String()).String(); again != c.want {
			t.Errorf("%s renormalized to %s", c.want, again)
		}
	}
}
