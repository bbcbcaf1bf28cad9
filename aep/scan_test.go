package aep

import (
	"encoding/json"
	"strings"
	"testing"
)

// Hostile and malformed input: each is a precise *Error, never a panic, and
// encoding/json agrees about what is JSON.
func TestMalformed(t *testing.T) {
	ev := `{` + baseR + `,"session":"s1","seq":0,"data":`
	tests := []struct {
		name string
		raw  string
		kind Kind
		want string // substring of the message
	}{
		{"empty", ``, KindSyntax, "empty input"},
		{"whitespace", " \n", KindSyntax, "empty input"},
		{"array", `[1]`, KindSyntax, "want '{'"},
		{"string", `"aep"`, KindSyntax, "want '{'"},
		{"truncated", ev + `{"a":`, KindSyntax, "unexpected end"},
		{"unterminated string", ev + `{"a":"b`, KindSyntax, "unterminated string"},
		{"trailing garbage", ev + `{}} x`, KindSyntax, "trailing data"},
		{"two objects", ev + `{}}{}`, KindSyntax, "trailing data"},
		{"trailing comma", ev + `{"a":1,}}`, KindSyntax, "member name"},
		{"trailing comma top", `{"aep":"0.1",}`, KindSyntax, "member name"},
		{"missing colon", `{"aep" "0.1"}`, KindSyntax, "':'"},
		{"single quotes", `{'aep':'0.1'}`, KindSyntax, "member name"},
		{"bare word", ev + `nope}`, KindSyntax, "invalid literal"},
		{"True", ev + `True}`, KindSyntax, "want a value"},
		{"leading zero", ev + `01}`, KindSyntax, "','"},
		{"plus number", ev + `+1}`, KindSyntax, "want a value"},
		{"bad fraction", ev + `1.}`, KindSyntax, "invalid number"},
		{"bad exponent", ev + `1e}`, KindSyntax, "invalid number"},
		{"NaN", ev + `NaN}`, KindSyntax, "want a value"},
		{"raw newline in string", ev + "\"a\nb\"}", KindSyntax, "control character"},
		{"bad escape", ev + `"\x41"}`, KindSyntax, "invalid escape"},
		{"short unicode escape", ev + `"\u12"}`, KindSyntax, `\u escape`},
		{"lone high surrogate", ev + `"\ud800"}`, KindSyntax, "unpaired surrogate"},
		{"lone low surrogate", ev + `"\udc00"}`, KindSyntax, "unpaired surrogate"},
		{"reversed surrogates", ev + `"\udc00\ud800"}`, KindSyntax, "unpaired surrogate"},
		{"invalid UTF-8", ev + "\"\xff\"}", KindSyntax, "invalid UTF-8"},
		{"overlong UTF-8", ev + "\"\xc0\xaf\"}", KindSyntax, "invalid UTF-8"},
		{"UTF-8 surrogate", ev + "\"\xed\xa0\x80\"}", KindSyntax, "invalid UTF-8"},
		{"truncated UTF-8", ev + "\"\xe2\x82\"}", KindSyntax, "invalid UTF-8"},
		{"invalid UTF-8 in name", `{"a` + "\xfe" + `":1}`, KindSyntax, "invalid UTF-8"},
		{"BOM", "\xef\xbb\xbf{}", KindSyntax, "want '{'"},
		{"NUL", ev + "\x00}", KindSyntax, "want a value"},
		{"unclosed array", ev + `[1,2}`, KindSyntax, "','"},
		{"mismatched close", ev + `{"a":[}]}`, KindSyntax, "want a value"},
		{"depth bomb arrays", ev + strings.Repeat("[", 100000), KindLimit, "nesting deeper than 64"},
		{"depth bomb objects", ev + strings.Repeat(`{"a":`, 100000), KindLimit, "nesting deeper than 64"},
		{"huge top-level string", `{"aep":"0.1","id":"` + strings.Repeat("a", 5000) + `"}`, KindLimit, "longer than 4096"},
		{"huge top-level number", `{"aep":"0.1","acme":` + strings.Repeat("9", 5000) + `}`, KindLimit, "longer than 4096"},
		{"huge member name", `{"` + strings.Repeat("a", 5000) + `":1}`, KindLimit, "longer than 4096"},
		{"too many members", `{"aep":"0.1"` + manyExt(200) + `}`, KindLimit, "top-level members"},
		{"too large", `{"aep":"0.1","data":"` + strings.Repeat("a", 1<<20) + `"}`, KindLimit, "over the limit"},
		{"duplicate core", `{"aep":"0.1","aep":"0.1"}`, KindInvalid, `duplicate member "aep"`},
		{"duplicate via escape", `{` + baseR + `,"\u0069d":"E2","session":"s1","seq":0}`, KindInvalid, `duplicate member "id"`},
		{"duplicate extension", `{` + baseR + `,"acme":1,"acme":2,"session":"s1","seq":0}`, KindInvalid, `duplicate member "acme"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := []byte(tt.raw)
			for _, d := range []Dialect{DialectR, DialectD} {
				_, err := ParseAs(d, raw, Limits{})
				e := AsError(err)
				if e == nil {
					t.Fatalf("%v: accepted", d)
				}
				if e.Kind != tt.kind || !strings.Contains(e.Message, tt.want) || e.Dialect != d {
					t.Fatalf("%v: got %v (kind %v), want kind %v and %q", d, e, e.Kind, tt.kind, tt.want)
				}
				if tt.kind == KindSyntax && (e.Offset < 0 || e.Offset > len(raw)) {
					t.Fatalf("offset %d outside the input", e.Offset)
				}
			}
			// encoding/json.Valid is laxer: it takes any JSON value, invalid
			// UTF-8 and unpaired surrogate escapes. Everything else must agree.
			lax := strings.Contains(tt.want, "UTF-8") || strings.Contains(tt.want, "surrogate") || strings.Contains(tt.want, "want '{'") && tt.name != "BOM"
			if tt.kind == KindSyntax && json.Valid(raw) != lax {
				t.Fatalf("encoding/json.Valid = %v", json.Valid(raw))
			}
		})
	}
}

// Nested values are skipped, not ignored: everything inside data is checked.
func TestNestedValid(t *testing.T) {
	ev := `{` + baseR + `,"session":"s1","seq":0,"data":%s}`
	for _, data := range []string{
		`{}`, `{"a":[]}`, `{"a":[1,-2.5e+3,0,0.0,1E-2,true,false,null,"x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"]}`,
		`{"é":"ü","nested":{"deep":[[[[{"k":"v"}]]]]}}`,
		" { \"a\" : [ 1 , 2 ] , \"b\" : { } } ",
		`{"dup":1,"dup":2}`, // nested duplicates are the payload's business
	} {
		raw := []byte(strings.Replace(ev, "%s", data, 1))
		if !json.Valid(raw) {
			t.Fatalf("test input not JSON: %s", raw)
		}
		if _, err := ParseAs(DialectR, raw, Limits{}); err != nil {
			t.Errorf("%s: %v", data, err)
		}
	}
	// Exactly at the depth limit is fine; one more is not.
	deep := func(n int) []byte {
		return []byte(`{` + baseR + `,"session":"s1","seq":0,"data":` + strings.Repeat(`{"a":`, n) + `1` + strings.Repeat(`}`, n) + `}`)
	}
	if _, err := ParseAs(DialectR, deep(63), Limits{}); err != nil {
		t.Errorf("depth 64: %v", err)
	}
	if _, err := ParseAs(DialectR, deep(64), Limits{}); AsError(err) == nil || AsError(err).Kind != KindLimit {
		t.Errorf("depth 65: %v", err)
	}
	if _, err := ParseAs(DialectR, deep(64), Limits{MaxDepth: 65}); err != nil {
		t.Errorf("depth 65 with MaxDepth 65: %v", err)
	}
}

func TestLimitsConfigurable(t *testing.T) {
	raw := []byte(`{` + baseR + `,"session":"s1","seq":0,"acme":"123456789012345678901234567890"}`)
	if _, err := ParseAs(DialectR, raw, Limits{MaxEventBytes: len(raw) - 1}); AsError(err) == nil || AsError(err).Code != CodeRLimitExceeded {
		t.Errorf("MaxEventBytes: %v", err)
	}
	if _, err := ParseAs(DialectR, raw, Limits{MaxEventBytes: len(raw)}); err != nil {
		t.Errorf("MaxEventBytes exact: %v", err)
	}
	if _, err := ParseAs(DialectR, raw, Limits{MaxStringBytes: 29}); AsError(err) == nil || AsError(err).Field != "acme" {
		t.Errorf("MaxStringBytes: %v", err)
	}
	if _, err := ParseAs(DialectR, raw, Limits{MaxExtensions: 1}); err != nil {
		t.Errorf("MaxExtensions 1: %v", err)
	}
	raw2 := []byte(`{` + baseR + `,"session":"s1","seq":0,"acme":"1","acme2":2}`)
	e := AsError(func() error { _, err := ParseAs(DialectR, raw2, Limits{MaxExtensions: 1}); return err }())
	if e == nil || e.Kind != KindLimit || e.HTTPStatus() != 413 {
		t.Errorf("MaxExtensions exceeded: %v", e)
	}
	if d := (Limits{MaxDepth: -3}).WithDefaults(); d.MaxDepth != DefaultMaxDepth {
		t.Errorf("negative limit not defaulted: %+v", d)
	}
}

// A D payload may be one long string; an R extension named payload may not.
func TestPayloadStringLimit(t *testing.T) {
	long := strings.Repeat("p", 10000)
	d := `{"aep_version":"0.1","id":"e","type":"a.b","source":"s","created_at":"2026-07-09T10:00:00Z","payload":"` + long + `"}`
	if _, err := ParseAs(DialectD, []byte(d), Limits{}); err != nil {
		t.Errorf("D string payload: %v", err)
	}
	r := `{` + baseR + `,"session":"s1","seq":0,"payload":"` + long + `"}`
	if _, err := ParseAs(DialectR, []byte(r), Limits{}); AsError(err) == nil || AsError(err).Kind != KindLimit || AsError(err).Field != "payload" {
		t.Errorf("R extension payload: %v", err)
	}
}
