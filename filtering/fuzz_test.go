package filtering

import (
	"encoding/json"
	"errors"
	"math/big"
	"net/url"
	"testing"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/internal/jsonscan"
)

// fuzzEvents are evaluated against every filter the fuzzer accepts, so that
// matching is exercised on whatever the parsers let through.
var fuzzEvents = []*aep.Attrs{
	{Dialect: aep.DialectD, Type: "memory.fact.added", Source: "memory:main", Session: "sess_01", Target: "t", Topic: "p"},
	{Dialect: aep.DialectD, Type: "tool.call.progress", Source: "s", Conversation: "c", Task: "k"},
	{Dialect: aep.DialectR, Type: "attention.requested", Session: "s1", Agent: "codex", Severity: "error",
		Ext: []aep.Ext{{Name: "acmeregion", Value: []byte(`"eu-1"`)}, {Name: "acmen", Value: []byte(`5.0`)}}},
	{Dialect: aep.DialectR, Type: "", Epoch: 3, HasEpoch: true, Capture: "full"},
}

// checkParsed asserts the properties every parse result has: a refusal is a
// *Error of the dialect with one of its codes; an accepted filter's
// normalized form parses back to itself, and matching does not panic.
func checkParsed(t *testing.T, d aep.Dialect, f *Filter, err error, reparse func([]byte) (*Filter, error)) {
	if err != nil {
		var fe *Error
		if !errors.As(err, &fe) || fe.Dialect != d || fe.Message == "" {
			t.Fatalf("error %v is not a dialect %v *Error", err, d)
		}
		switch fe.Code {
		case CodeSubscriptionRejected:
			if d != aep.DialectD {
				t.Fatalf("code %s for dialect %v", fe.Code, d)
			}
		case CodeInvalidFilter, CodeLimitExceeded:
			if d != aep.DialectR {
				t.Fatalf("code %s for dialect %v", fe.Code, d)
			}
		default:
			t.Fatalf("unknown code %q", fe.Code)
		}
		return
	}
	if f.Dialect() != d {
		t.Fatalf("dialect %v", f.Dialect())
	}
	if !json.Valid(f.src) {
		t.Fatalf("normalized form is not JSON: %s", f.src)
	}
	g, err := reparse(f.src)
	if err != nil {
		t.Fatalf("normalized form %s refused: %v", f.src, err)
	}
	if g.String() != f.String() {
		t.Fatalf("normalized form not stable: %s then %s", f, g)
	}
	for _, a := range fuzzEvents {
		if f.Match(a) != g.Match(a) {
			t.Fatalf("filter %s and its normal form disagree on %+v", f, *a)
		}
	}
}

func FuzzParseD(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"types":"*"}`, `{"types":["memory.*","tool.*.progress"],"source":"memory:main"}`,
		`{"types":"a.b","from_cursor":"c","delivery_mode":"replayable","x":1}`, `{"session_id":"s"}`,
		`{"types":["a..b"]}`, `{"types":"é.*"}`, `{"types":"a.b","types":"c"}`, `[]`, `{"source":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		flt, err := ParseD(data)
		checkParsed(t, aep.DialectD, flt, err, ParseD)
	})
}

func FuzzParseDQuery(f *testing.F) {
	for _, s := range []string{
		"types=a,b&types=c", "session_id=s", "", "types=", "types=a..b", "source=x&from_cursor=1&delivery_mode=best_effort",
		"types=*&from_cursor=a&from_cursor=b", "types=%ff", "task_id=k,l&conversation_id=c",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		flt, err := ParseDQuery(q)
		checkParsed(t, aep.DialectD, flt, err, ParseD)
	})
}

func FuzzParseR(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"type":["attention.*","error.*"],"severity":{"gte":"notice"}}`, `{"session":"s_8f2c"}`,
		`{"agent":["claude-code","codex"],"type":"tool.denied"}`, `{"epoch":0}`, `{"acmeregion":"eu-1"}`,
		`{"seq":5}`, `{"type":"*"}`, `{"agent":"claude*"}`, `{"agent":[]}`, `{"acmen":[1,1.0,1e0,true,"1"]}`,
		`{"severity":{"gte":"error","lte":"info"}}`, `{"capture":["none","full"]}`, `{"NotAnAttr":"y"}`,
		`{"cause":["01JX9YB4RQ","01JX9YB4RQ"]}`, `{"cause":"01J*"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		flt, err := ParseR(data)
		checkParsed(t, aep.DialectR, flt, err, ParseR)
	})
}

// FuzzRawScalar checks the allocation-free JSON comparisons against
// encoding/json and math/big: a raw string literal equals exactly the
// string it decodes to, and a raw number equals the integer it denotes.
func FuzzRawScalar(f *testing.F) {
	for _, s := range []string{`"eu-1"`, `"eu\u002d1"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\"\\\/\b\f\n\r\t"`,
		`5`, `-0`, `5.0`, `50e-1`, `0.5e1`, `9223372036854775807`, `-9223372036854775808`, `9223372036854775808`,
		`1e19`, `1.5`, `1e-400`, `01`, `-`, `1.`, `true`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		raw = jsonscan.TrimSpace(raw) // equalRaw trims before comparing
		var s string
		if json.Unmarshal(raw, &s) == nil && len(raw) > 0 && raw[0] == '"' {
			if sc := (scalar{kind: kString, s: s}); !sc.equalRaw(raw) {
				t.Fatalf("%s does not equal its decoding %q", raw, s)
			}
			if sc := (scalar{kind: kString, s: s + "x"}); sc.equalRaw(raw) {
				t.Fatalf("%s equals %q", raw, s+"x")
			}
		}
		v, res := parseJSONInt(raw)
		var n json.Number
		isNum := json.Unmarshal(raw, &n) == nil && len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9')
		if !isNum {
			if res != intSyntax {
				t.Fatalf("%q is not a JSON number but parsed as %d (%d)", raw, v, res)
			}
			return
		}
		if len(n) > 300 {
			return // beyond the exact precision used below
		}
		bf, _, err := big.ParseFloat(string(n), 10, 4096, big.ToNearestEven)
		if err != nil || bf.IsInf() {
			return // exponent beyond big.Float; parseJSONInt must still not panic
		}
		bi, acc := bf.Int(nil)
		switch {
		case acc != big.Exact:
			if res != intFraction {
				t.Fatalf("%s is not an integer, got result %d value %d", raw, res, v)
			}
		case !bi.IsInt64():
			if res != intRange {
				t.Fatalf("%s is outside int64, got result %d value %d", raw, res, v)
			}
		default:
			if res != intOK || v != bi.Int64() {
				t.Fatalf("%s: got %d (%d), want %d", raw, v, res, bi.Int64())
			}
		}
	})
}
