package jsonscan

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"
	"unicode/utf8"
)

var fuzzSeeds = []string{
	`{"a":[1,{"b":"}]"}],"c":"\"{"}`, `"r\u00e9sum\u00e9"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ud83d\u0041"`,
	`[1, -2.5e3, true, false, null, "x"]`, ` {"a" : {"b" : [] } } `, `{"a":1,}`, `[}`, `"\`, `{"a":"x`,
	`12 3`, `"\"\\\/\b\f\n\r\t"`, "\"\xff\"", `{"\u0061":1,"a":2}`, `[[[[]]]]`, `1x`, `{}`, `[]`,
}

// bounded checks an offset returned for b at i: -1, or past i within b.
func bounded(t *testing.T, what string, b []byte, i, got int) {
	t.Helper()
	if got != -1 && (got <= i || got > len(b)) {
		t.Fatalf("%s(%q, %d) = %d: out of range", what, b, i, got)
	}
}

// FuzzValueEnd holds ValueEnd and StringEnd against encoding/json's
// Decoder: where the decoder reads a first value (whatever follows it),
// ValueEnd ends it at the same offset. Then, for every offset of any input,
// the offsets returned stay in range and nothing panics.
func FuzzValueEnd(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		dec := json.NewDecoder(bytes.NewReader(b))
		var raw json.RawMessage
		if dec.Decode(&raw) == nil {
			end := int(dec.InputOffset())
			start := SkipSpace(b, 0)
			// A scalar ends at a delimiter; the decoder also stops at
			// bytes that cannot continue it ("1x"), which ValueEnd does
			// not look at.
			delimited := end == len(b) || IsSpace(b[end]) || bytes.IndexByte([]byte(",}]"), b[end]) >= 0
			if c := b[start]; c == '"' || c == '{' || c == '[' || delimited {
				if got := ValueEnd(b, start); got != end {
					t.Fatalf("ValueEnd(%q, %d) = %d, encoding/json ends the value at %d", b, start, got, end)
				}
			}
			if b[start] == '"' {
				if got := StringEnd(b, start); got != end {
					t.Fatalf("StringEnd(%q, %d) = %d, want %d", b, start, got, end)
				}
			}
		}
		for i := -1; i <= len(b); i++ {
			bounded(t, "ValueEnd", b, i, ValueEnd(b, i))
			bounded(t, "StringEnd", b, i, StringEnd(b, i))
			if j := SkipSpace(b, i); i >= 0 && (j < i || j > len(b)) {
				t.Fatalf("SkipSpace(%q, %d) = %d", b, i, j)
			}
		}
	})
}

// FuzzUnescape holds the string decoding against encoding/json: a string
// literal json.Unmarshal accepts decodes to the same string by
// StringEquals and, when its raw bytes are valid UTF-8, by
// AppendUnescaped; Escape and Hex4 never read outside the input.
func FuzzUnescape(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		b = TrimSpace(b)
		var s string
		if len(b) >= 2 && b[0] == '"' && json.Unmarshal(b, &s) == nil {
			if !StringEquals(b, s) {
				t.Fatalf("StringEquals(%q, %q) = false, the encoding/json decoding", b, s)
			}
			if StringEquals(b, s+"x") || (s != "" && StringEquals(b, s[:len(s)-1])) {
				t.Fatalf("StringEquals(%q) accepts a string other than %q", b, s)
			}
			if got := AppendUnescaped(nil, b[1:len(b)-1]); utf8.Valid(b) && string(got) != s {
				t.Fatalf("AppendUnescaped(%q) = %q, encoding/json decodes %q", b, got, s)
			}
		}
		_ = AppendUnescaped(nil, b)
		_ = StringEquals(b, string(b))
		for i := -1; i <= len(b); i++ {
			if r, n := Escape(b, i); n != 0 && (i < 0 || i+n > len(b) || !utf8.ValidRune(r)) {
				t.Fatalf("Escape(%q, %d) = %q, %d", b, i, r, n)
			}
			_, _ = Hex4(b, i)
		}
	})
}

// FuzzMembers holds the iterators against encoding/json's token stream:
// for an object (or array) the decoder reads, Members (Elements) yields
// the same names and values in the same order and ends where the decoder
// does. On any input, iteration stops and reports offsets in range.
func FuzzMembers(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		start := SkipSpace(b, 0)
		if json.Valid(b) {
			checkMembers(t, b, start)
		}
		it := Object(b, start)
		for m, ok := it.Next(); ok; m, ok = it.Next() {
			if m.Name < start || m.NameEnd <= m.Name || m.Value < m.NameEnd || m.End <= m.Value || m.End > len(b) || (m.Next >= 0 && m.Next <= m.End) {
				t.Fatalf("member %+v of %q out of order", m, b)
			}
			_ = m.RawName(b)
		}
		el := Array(b, start)
		for s, e, ok := el.Next(); ok; s, e, ok = el.Next() {
			if s <= start || e <= s || e > len(b) {
				t.Fatalf("element [%d,%d) of %q out of range", s, e, b)
			}
		}
	})
}

// checkMembers compares the iteration of the valid JSON value at b[start]
// with encoding/json's tokens.
func checkMembers(t *testing.T, b []byte, start int) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		t.Fatalf("token of valid %q: %v", b, err)
	}
	switch tok {
	case json.Delim('{'):
		it := Object(b, start)
		for dec.More() {
			key, err := dec.Token()
			if err != nil {
				t.Fatal(err)
			}
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
			m, ok := it.Next()
			if !ok || !StringEquals(b[m.Name:m.NameEnd], key.(string)) || !sameJSON(b[m.Value:m.End], v) {
				t.Fatalf("%q: member %q=%s, iterator gave %+v (ok %v)", b, key, v, m, ok)
			}
		}
		if _, ok := it.Next(); ok {
			t.Fatalf("%q: the iterator yields more members than encoding/json", b)
		}
		if _, err := dec.Token(); err != nil || it.End() != int(dec.InputOffset()) {
			t.Fatalf("%q: object ends at %d, encoding/json says %d", b, it.End(), dec.InputOffset())
		}
	case json.Delim('['):
		it := Array(b, start)
		for dec.More() {
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
			s, e, ok := it.Next()
			if !ok || !sameJSON(b[s:e], v) {
				t.Fatalf("%q: element %s, iterator gave [%d,%d) (ok %v)", b, v, s, e, ok)
			}
		}
		if _, _, ok := it.Next(); ok {
			t.Fatalf("%q: the iterator yields more elements than encoding/json", b)
		}
		if _, err := dec.Token(); err != nil || it.End() != int(dec.InputOffset()) {
			t.Fatalf("%q: array ends at %d, encoding/json says %d", b, it.End(), dec.InputOffset())
		}
	default:
		if it := Object(b, start); it.End() != -1 {
			t.Fatalf("%q: an object iteration over a scalar", b)
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("%q: data after the value: %v", b, err)
	}
}

// sameJSON reports whether two valid JSON texts are the same bytes but for
// whitespace between tokens.
func sameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
}
