package aep

import (
	"strconv"
	"unicode/utf8"

	"github.com/aep-gateway/aep-gateway/internal/jsonscan"
)

// The scanner validates JSON syntax (RFC 8259) and UTF-8 in one pass over the
// bytes, records the envelope's top-level members (name, value span, value
// kind) and skips nested values with a depth count. It never builds a tree
// and never allocates on the happy path except for a member name written with
// escapes. The validation (syntax, UTF-8, unpaired surrogates, depth) is its
// own; whitespace and escape decoding come from internal/jsonscan, which
// also walks the values once they are validated (walk.go).

type valKind uint8

const (
	vString valKind = iota + 1
	vNumber
	vObject
	vArray
	vTrue
	vFalse
	vNull
)

func (k valKind) String() string {
	switch k {
	case vString:
		return "a string"
	case vNumber:
		return "a number"
	case vObject:
		return "an object"
	case vArray:
		return "an array"
	case vTrue, vFalse:
		return "a boolean"
	case vNull:
		return "null"
	}
	return "a value"
}

// member is one top-level member of the envelope.
type member struct {
	name       []byte // decoded name (a sub-slice of the input unless escaped)
	attr       attr   // the name's classification, aUnknown when not a known name
	start, end int    // value span in the input
	kind       valKind
	esc        bool // a string value that contains escapes
	nameEsc    bool // the name is written with escapes
	ext        bool // an R extension attribute, set by validation
}

// raw returns the member's value bytes.
func (m *member) raw(b []byte) []byte { return b[m.start:m.end] }

// strBody returns a string value's raw bytes between the quotes.
func (m *member) strBody(b []byte) []byte { return b[m.start+1 : m.end-1] }

// strSafe[c] is true for a byte that may appear in a JSON string as is and
// needs no further look: printable ASCII other than '"' and '\\'.
var strSafe = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

type scanner struct {
	b        []byte
	lim      Limits
	maxMem   int
	idx      [numAttrs]int32 // 1 + index of each known attribute's member, 0 when absent
	nUnknown int

	// The members in document order: the first ones in arr, the rest in
	// spill. A fixed array keeps a stack-allocated scanner off the heap
	// (escape analysis moves a slice of a local array stored through a
	// pointer to the heap).
	arr   [48]member
	n     int
	spill []member
}

// mem returns the i-th member.
func (s *scanner) mem(i int) *member {
	if i < len(s.arr) {
		return &s.arr[i]
	}
	return &s.spill[i-len(s.arr)]
}

func (s *scanner) add(m member) {
	if s.n < len(s.arr) {
		s.arr[s.n] = m
	} else {
		s.spill = append(s.spill, m)
	}
	s.n++
}

func (s *scanner) skipWS(i int) int { return jsonscan.SkipSpace(s.b, i) }

// unexpected reports what was found at i when something else was wanted.
func (s *scanner) unexpected(i int, want string) *failure {
	if i >= len(s.b) {
		return failAt(KindSyntax, i, "unexpected end of input, want "+want)
	}
	return failAt(KindSyntax, i, "unexpected "+strconv.QuoteRune(rune(s.b[i]))+", want "+want)
}

// scanTop scans the whole input as one JSON object and records its members.
func (s *scanner) scanTop() *failure {
	b := s.b
	if len(b) > s.lim.MaxEventBytes {
		return &failure{kind: KindLimit, msg: "event is " + strconv.Itoa(len(b)) + " bytes, over the limit of " + strconv.Itoa(s.lim.MaxEventBytes), off: -1}
	}
	i := s.skipWS(0)
	if i >= len(b) || b[i] != '{' {
		if i >= len(b) {
			return failAt(KindSyntax, i, "empty input, want a JSON object")
		}
		return s.unexpected(i, "'{' (an event is a JSON object)")
	}
	i = s.skipWS(i + 1)
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			var f *failure
			if i, f = s.topMember(i); f != nil {
				return f
			}
			i = s.skipWS(i)
			if i < len(b) && b[i] == ',' {
				i = s.skipWS(i + 1)
				continue
			}
			if i < len(b) && b[i] == '}' {
				i++
				break
			}
			return s.unexpected(i, "',' or '}'")
		}
	}
	if i = s.skipWS(i); i != len(b) {
		return failAt(KindSyntax, i, "trailing data after the event object")
	}
	return nil
}

// topMember scans one "name": value pair of the envelope starting at i.
func (s *scanner) topMember(i int) (int, *failure) {
	b := s.b
	if i >= len(b) || b[i] != '"' {
		return 0, s.unexpected(i, "a member name")
	}
	nameEnd, nameEsc, f := s.scanString(i)
	if f != nil {
		return 0, f
	}
	if nameEnd-i-2 > s.lim.MaxStringBytes {
		return 0, failAt(KindLimit, i, "member name longer than "+strconv.Itoa(s.lim.MaxStringBytes)+" bytes")
	}
	var name []byte
	if nameEsc {
		name = jsonscan.AppendUnescaped(nil, b[i+1:nameEnd-1])
	} else {
		name = b[i+1 : nameEnd-1]
	}
	m := member{name: name, attr: lookupAttr(name), nameEsc: nameEsc}
	if m.attr != aUnknown {
		if s.idx[m.attr] != 0 {
			return 0, &failure{kind: KindInvalid, field: string(name), msg: "duplicate member " + quoteTrunc(name) + " (ambiguous: the first and the last value differ in meaning between JSON parsers)", off: i}
		}
	} else {
		for k := 0; k < s.n; k++ {
			if o := s.mem(k); o.attr == aUnknown && string(o.name) == string(name) {
				return 0, &failure{kind: KindInvalid, field: string(name), msg: "duplicate member " + quoteTrunc(name), off: i}
			}
		}
		s.nUnknown++
	}
	if s.n >= s.maxMem {
		return 0, failAt(KindLimit, i, "more than "+strconv.Itoa(s.maxMem)+" top-level members")
	}
	i = s.skipWS(nameEnd)
	if i >= len(b) || b[i] != ':' {
		return 0, s.unexpected(i, "':'")
	}
	i = s.skipWS(i + 1)
	m.start = i
	if i < len(b) && b[i] == '"' {
		end, esc, f := s.scanString(i)
		if f != nil {
			return 0, f
		}
		if end-i-2 > s.lim.MaxStringBytes && m.attr != aPayload {
			return 0, &failure{kind: KindLimit, field: string(name), msg: "value of " + quoteTrunc(name) + " longer than " + strconv.Itoa(s.lim.MaxStringBytes) + " bytes", off: i}
		}
		m.end, m.kind, m.esc = end, vString, esc
	} else {
		end, kind, f := s.skipValue(i, 2)
		if f != nil {
			return 0, f
		}
		if kind == vNumber && end-i > s.lim.MaxStringBytes {
			return 0, &failure{kind: KindLimit, field: string(name), msg: "number " + quoteTrunc(name) + " longer than " + strconv.Itoa(s.lim.MaxStringBytes) + " bytes", off: i}
		}
		m.end, m.kind = end, kind
	}
	s.add(m)
	if m.attr != aUnknown {
		s.idx[m.attr] = int32(s.n)
	}
	return m.end, nil
}

// skipValue validates the value starting at i, nested at the given depth,
// and returns the index just past it.
func (s *scanner) skipValue(i, depth int) (int, valKind, *failure) {
	b := s.b
	if i >= len(b) {
		return 0, 0, s.unexpected(i, "a value")
	}
	switch c := b[i]; {
	case c == '"':
		end, _, f := s.scanString(i)
		return end, vString, f
	case c == '{':
		end, f := s.skipObject(i, depth)
		return end, vObject, f
	case c == '[':
		end, f := s.skipArray(i, depth)
		return end, vArray, f
	case c == '-' || (c >= '0' && c <= '9'):
		end, f := s.scanNumber(i)
		return end, vNumber, f
	case c == 't':
		return s.literal(i, "true", vTrue)
	case c == 'f':
		return s.literal(i, "false", vFalse)
	case c == 'n':
		return s.literal(i, "null", vNull)
	}
	return 0, 0, s.unexpected(i, "a value")
}

func (s *scanner) literal(i int, lit string, k valKind) (int, valKind, *failure) {
	if len(s.b)-i < len(lit) || string(s.b[i:i+len(lit)]) != lit {
		return 0, 0, failAt(KindSyntax, i, "invalid literal, want "+lit)
	}
	return i + len(lit), k, nil
}

func (s *scanner) tooDeep(i int) *failure {
	return failAt(KindLimit, i, "nesting deeper than "+strconv.Itoa(s.lim.MaxDepth)+" levels")
}

func (s *scanner) skipObject(i, depth int) (int, *failure) {
	if depth > s.lim.MaxDepth {
		return 0, s.tooDeep(i)
	}
	b := s.b
	i = s.skipWS(i + 1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, s.unexpected(i, "a member name")
		}
		end, _, f := s.scanString(i)
		if f != nil {
			return 0, f
		}
		i = s.skipWS(end)
		if i >= len(b) || b[i] != ':' {
			return 0, s.unexpected(i, "':'")
		}
		i = s.skipWS(i + 1)
		if i, _, f = s.skipValue(i, depth+1); f != nil {
			return 0, f
		}
		i = s.skipWS(i)
		if i < len(b) && b[i] == ',' {
			i = s.skipWS(i + 1)
			continue
		}
		if i < len(b) && b[i] == '}' {
			return i + 1, nil
		}
		return 0, s.unexpected(i, "',' or '}'")
	}
}

func (s *scanner) skipArray(i, depth int) (int, *failure) {
	if depth > s.lim.MaxDepth {
		return 0, s.tooDeep(i)
	}
	b := s.b
	i = s.skipWS(i + 1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for {
		var f *failure
		if i, _, f = s.skipValue(i, depth+1); f != nil {
			return 0, f
		}
		i = s.skipWS(i)
		if i < len(b) && b[i] == ',' {
			i = s.skipWS(i + 1)
			continue
		}
		if i < len(b) && b[i] == ']' {
			return i + 1, nil
		}
		return 0, s.unexpected(i, "',' or ']'")
	}
}

// scanString validates the string starting at the quote at i and returns the
// index just past the closing quote and whether it contains escapes. Raw
// bytes must be valid UTF-8 without control characters; \u escapes must not
// leave a surrogate unpaired (RFC 7493 I-JSON §2.1), so every decoded
// string is valid Unicode.
func (s *scanner) scanString(i int) (int, bool, *failure) {
	b := s.b
	start := i
	i++
	esc := false
	for {
		for i < len(b) && strSafe[b[i]] {
			i++
		}
		if i >= len(b) {
			return 0, false, failAt(KindSyntax, start, "unterminated string")
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, esc, nil
		case c == '\\':
			esc = true
			n, f := escapeLen(b, i)
			if f != nil {
				return 0, false, f
			}
			i += n
		case c < 0x20:
			return 0, false, failAt(KindSyntax, i, "control character in a string (escape it)")
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size <= 1 {
				return 0, false, failAt(KindSyntax, i, "invalid UTF-8")
			}
			i += size
		}
	}
}

// escapeLen validates the escape sequence at b[i] == '\\' and returns its
// length (2, 6, or 12 for a surrogate pair).
func escapeLen(b []byte, i int) (int, *failure) {
	r, n := jsonscan.Escape(b, i)
	switch {
	case n == 0 && i+1 >= len(b):
		return 0, failAt(KindSyntax, i, "unterminated escape")
	case n == 0 && b[i+1] == 'u':
		return 0, failAt(KindSyntax, i, `invalid \u escape`)
	case n == 0:
		return 0, failAt(KindSyntax, i, "invalid escape")
	case n == 6 && r == utf8.RuneError:
		// Escape decodes an unpaired surrogate to U+FFFD, as decoders
		// do; only a written \uFFFD is that character.
		if h, _ := jsonscan.Hex4(b, i+2); h != utf8.RuneError {
			return 0, failAt(KindSyntax, i, `unpaired surrogate in \u escape`)
		}
	}
	return n, nil
}

// scanNumber validates the JSON number starting at i.
func (s *scanner) scanNumber(i int) (int, *failure) {
	b := s.b
	start := i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return 0, failAt(KindSyntax, start, "invalid number")
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return 0, failAt(KindSyntax, start, "invalid number")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return 0, failAt(KindSyntax, start, "invalid number")
		}
	}
	return i, nil
}

// QuoteTrunc quotes a client's string for an error message, cut to a
// readable length, as the parser's own messages do.
func QuoteTrunc(s string) string { return quoteTrunc([]byte(s)) }

// quoteTrunc quotes b for an error message, cut to a readable length.
func quoteTrunc(b []byte) string {
	const max = 64
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "..."
	}
	return strconv.Quote(string(b))
}
