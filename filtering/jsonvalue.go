package filtering

import (
	"unicode/utf8"
)

// scalarKind is the JSON type of a dialect R filter scalar.
type scalarKind uint8

const (
	kString scalarKind = iota + 1
	kInt
	kBool
)

// scalar is one JSON string, integer or boolean (AEP-0003 §6.1 Scalar), in
// canonical form: strings decoded (escapes resolved), integers as int64.
type scalar struct {
	kind scalarKind
	s    string
	i    int64
	b    bool
}

// equalRaw compares the scalar with a raw JSON value without coercion:
// strings equal after decoding escapes, numbers equal when they denote the
// same integer (5, 5.0 and 5e0 are one value; 5.5 equals no scalar), true
// and false only themselves. null, objects and arrays equal nothing. It
// never allocates.
func (s *scalar) equalRaw(raw []byte) bool {
	raw = trimJSONSpace(raw)
	if len(raw) == 0 {
		return false
	}
	switch c := raw[0]; {
	case c == '"':
		return s.kind == kString && jsonStringEquals(raw, s.s)
	case c == 't':
		return s.kind == kBool && s.b && string(raw) == "true"
	case c == 'f':
		return s.kind == kBool && !s.b && string(raw) == "false"
	case c == '-' || c >= '0' && c <= '9':
		if s.kind != kInt {
			return false
		}
		v, ok := parseJSONInt(raw)
		return ok == intOK && v == s.i
	}
	return false
}

func trimJSONSpace(b []byte) []byte {
	for len(b) > 0 && isJSONSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isJSONSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// jsonStringEquals reports whether the raw JSON string literal lit (with its
// quotes) decodes to want. Escapes and invalid UTF-8 are resolved as
// encoding/json does (a lone surrogate or an invalid byte decodes to U+FFFD). It never allocates.
func jsonStringEquals(lit []byte, want string) bool {
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return false
	}
	in := lit[1 : len(lit)-1]
	j := 0
	var buf [utf8.UTFMax]byte
	for i := 0; i < len(in); {
		c := in[i]
		if c < utf8.RuneSelf && c != '\\' {
			if j >= len(want) || want[j] != c {
				return false
			}
			i++
			j++
			continue
		}
		if c >= utf8.RuneSelf {
			// Invalid UTF-8 decodes to U+FFFD, as in encoding/json.
			r, size := utf8.DecodeRune(in[i:])
			if r == utf8.RuneError && size == 1 {
				if len(want)-j < 3 || want[j:j+3] != "\uFFFD" {
					return false
				}
				i++
				j += 3
				continue
			}
			if len(want)-j < size || string(in[i:i+size]) != want[j:j+size] {
				return false
			}
			i += size
			j += size
			continue
		}
		if i+1 >= len(in) {
			return false
		}
		var r rune
		switch in[i+1] {
		case '"', '\\', '/':
			r = rune(in[i+1])
		case 'b':
			r = '\b'
		case 'f':
			r = '\f'
		case 'n':
			r = '\n'
		case 'r':
			r = '\r'
		case 't':
			r = '\t'
		case 'u':
			var n int
			r, n = decodeUEscape(in[i:])
			if n == 0 {
				return false
			}
			i += n
			goto emit
		default:
			return false
		}
		i += 2
	emit:
		n := utf8.EncodeRune(buf[:], r)
		if j+n > len(want) || string(buf[:n]) != want[j:j+n] {
			return false
		}
		j += n
	}
	return j == len(want)
}

// decodeUEscape decodes "\uXXXX" (and a following low surrogate) at the
// start of b, returning the rune and the bytes consumed (0 if malformed).
func decodeUEscape(b []byte) (rune, int) {
	r, ok := hex4(b)
	if !ok {
		return 0, 0
	}
	if r >= 0xD800 && r < 0xDC00 {
		if r2, ok2 := hex4(b[6:]); ok2 && len(b) >= 12 && b[6] == '\\' && r2 >= 0xDC00 && r2 < 0xE000 {
			return (r-0xD800)<<10 | (r2 - 0xDC00) + 0x10000, 12
		}
		return utf8.RuneError, 6
	}
	if r >= 0xDC00 && r < 0xE000 {
		return utf8.RuneError, 6
	}
	return r, 6
}

// hex4 parses `\uXXXX` at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range b[2:6] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// intResult classifies a JSON number.
type intResult uint8

const (
	intOK       intResult = iota // an integer in int64 range
	intFraction                  // a number with a non-zero fractional part
	intRange                     // an integer outside int64
	intSyntax                    // not a JSON number
)

// parseJSONInt canonicalizes a JSON number literal to an int64 when it
// denotes an integer: 5, 5.0, 50e-1 and 0.5e1 are all 5; -0 is 0. It never
// allocates.
func parseJSONInt(b []byte) (int64, intResult) {
	i := 0
	neg := false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	intStart := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	intEnd := i
	if intEnd == intStart || (b[intStart] == '0' && intEnd-intStart > 1) {
		return 0, intSyntax
	}
	fracStart, fracEnd := i, i
	if i < len(b) && b[i] == '.' {
		i++
		fracStart = i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		fracEnd = i
		if fracEnd == fracStart {
			return 0, intSyntax
		}
	}
	exp := 0
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		eneg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			eneg = b[i] == '-'
			i++
		}
		es := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if exp < 1<<20 {
				exp = exp*10 + int(b[i]-'0')
			}
			i++
		}
		if i == es {
			return 0, intSyntax
		}
		if eneg {
			exp = -exp
		}
	}
	if i != len(b) {
		return 0, intSyntax
	}
	// Digits d[0..n) = integer digits then fraction digits; value =
	// d * 10^(exp - fractionDigits). Strip leading and trailing zeros.
	digit := func(k int) byte {
		if k < intEnd-intStart {
			return b[intStart+k]
		}
		return b[fracStart+k-(intEnd-intStart)]
	}
	n := (intEnd - intStart) + (fracEnd - fracStart)
	scale := exp - (fracEnd - fracStart)
	lo, hi := 0, n
	for lo < hi && digit(lo) == '0' {
		lo++
	}
	for hi > lo && digit(hi-1) == '0' {
		hi--
		scale++
	}
	if lo == hi {
		return 0, intOK
	}
	if scale < 0 {
		return 0, intFraction
	}
	if hi-lo+scale > 19 {
		return 0, intRange
	}
	var u uint64
	for k := lo; k < hi; k++ {
		u = u*10 + uint64(digit(k)-'0')
	}
	for ; scale > 0; scale-- {
		u *= 10
	}
	// At most 19 digits: u < 10^19 < 2^64, no wrap-around.
	if neg {
		if u > 1<<63 {
			return 0, intRange
		}
		return -int64(u), intOK
	}
	if u > 1<<63-1 {
		return 0, intRange
	}
	return int64(u), intOK
}
