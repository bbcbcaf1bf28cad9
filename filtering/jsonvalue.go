package filtering

import "github.com/aep-gateway/aep-gateway/internal/jsonscan"

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
// strings equal after decoding escapes (and invalid UTF-8, as encoding/json
// does: [jsonscan.StringEquals]), numbers equal when they denote the
// same integer (5, 5.0 and 5e0 are one value; 5.5 equals no scalar), true
// and false only themselves. null, objects and arrays equal nothing. It
// never allocates.
func (s *scalar) equalRaw(raw []byte) bool {
	raw = jsonscan.TrimSpace(raw)
	if len(raw) == 0 {
		return false
	}
	switch c := raw[0]; {
	case c == '"':
		return s.kind == kString && jsonscan.StringEquals(raw, s.s)
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
