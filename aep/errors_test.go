package aep

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
)

func TestErrorJSON(t *testing.T) {
	tests := []struct {
		raw  string
		d    Dialect
		want string
	}{
		{`{` + baseR + `,"session":"s","seq":-1}`, DialectR,
			`{"error":"invalid-event","detail":"must be a non-negative integer literal up to 2^63-1 (AEP-0001 §5.1); got \"-1\"","field":"seq"}`},
		{`{"aep":"0.2"}`, DialectR,
			`{"error":"invalid-event","detail":"unsupported envelope version \"0.2\"; this gateway accepts [0.1] (AEP-0001 §5.1 #1)","field":"aep","versions":["0.1"]}`},
		{`{"aep_version":"1.0"}`, DialectD,
			`{"code":"unsupported_version","message":"unsupported aep_version \"1.0\"; supported: [0.1]","retryable":false,"details":{"field":"aep_version","supported":["0.1"]}}`},
		{`{"aep_version":"0.1"`, DialectD,
			`{"code":"invalid_envelope","message":"unexpected end of input, want ',' or '}' at byte 20","retryable":false}`},
	}
	for _, tt := range tests {
		_, err := ParseAs(tt.d, []byte(tt.raw), Limits{})
		e := AsError(fmt.Errorf("wrapped: %w", err))
		if e == nil {
			t.Fatalf("%s: accepted", tt.raw)
		}
		got := e.AppendJSON(nil)
		if string(got) != tt.want || !json.Valid(got) {
			t.Errorf("%s:\n got %s\nwant %s", tt.raw, got, tt.want)
		}
	}
	if AsError(errors.New("x")) != nil {
		t.Error("AsError of a plain error")
	}
}

func TestHTTPStatus(t *testing.T) {
	for _, tt := range []struct {
		d    Dialect
		k    Kind
		want int
	}{
		{DialectR, KindSyntax, 400}, {DialectR, KindInvalid, 400}, {DialectR, KindVersion, 400},
		{DialectR, KindDialect, 400}, {DialectR, KindLimit, 413},
		{DialectD, KindSyntax, 400}, {DialectD, KindInvalid, 202}, {DialectD, KindLimit, 202},
	} {
		if got := (&Error{Dialect: tt.d, Kind: tt.k}).HTTPStatus(); got != tt.want {
			t.Errorf("%v %v: %d, want %d", tt.d, tt.k, got, tt.want)
		}
	}
}

func TestCodes(t *testing.T) {
	if n := len(Codes(DialectD)); n != 16 {
		t.Errorf("D has %d codes, want the 16 of error-model.md", n)
	}
	for _, d := range []Dialect{DialectR, DialectD} {
		seen := map[string]bool{}
		for _, c := range Codes(d) {
			if seen[c.Code] || c.Dialect != d || c.Ref == "" {
				t.Errorf("%v: bad entry %+v", d, c)
			}
			seen[c.Code] = true
			if got, ok := LookupCode(d, c.Code); !ok || got != c {
				t.Errorf("LookupCode(%v, %q)", d, c.Code)
			}
		}
	}
	if c, _ := LookupCode(DialectR, CodeRInvalidEvent); c.Status != 400 {
		t.Errorf("invalid-event status %d", c.Status)
	}
	if c, _ := LookupCode(DialectD, CodeDInternalError); !c.Retryable || c.WSClose != 1011 {
		t.Errorf("internal_error %+v", c)
	}
	if _, ok := LookupCode(DialectUnknown, "x"); ok {
		t.Error("lookup in unknown dialect")
	}
}

func TestVersions(t *testing.T) {
	for v, want := range map[string]bool{"0.1": true, " 0.1 ": true, "0.7": true, "1.0": false, "9.9": false, "": false, "0": false, "0.": false, ".1": false, "a.b": false, "0.1.2": false} {
		if got := AcceptVersionHeader(v); got != want {
			t.Errorf("AcceptVersionHeader(%q) = %v", v, got)
		}
	}
	if !VersionSupported(DialectD, "0.1") || VersionSupported(DialectD, "0.2") || VersionSupported(DialectUnknown, "0.1") {
		t.Error("VersionSupported")
	}
	v := SupportedVersions(DialectR)
	v[0] = "x"
	if SupportedVersions(DialectR)[0] != "0.1" {
		t.Error("SupportedVersions returns shared storage")
	}
}
