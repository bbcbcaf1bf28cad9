package aep

import (
	"bytes"
	"math"
	"strconv"

	"github.com/aep-gateway/aep-gateway/internal/jsonscan"
)

// Walking nested values that the scan has already validated: the delivery
// member and evidence_chain of a D event and, with payload validation on,
// the data of a registered R type. The bytes are known to be valid JSON, so
// the walk only finds spans with internal/jsonscan; it does not check
// syntax again.

// span is one JSON value of the input: b[start:end], of the given kind.
type span struct {
	start, end int
	kind       valKind
}

// spanAt returns the span of the validated value b[start:end].
func spanAt(b []byte, start, end int) span {
	k := vNumber
	switch b[start] {
	case '"':
		k = vString
	case '{':
		k = vObject
	case '[':
		k = vArray
	case 't':
		k = vTrue
	case 'f':
		k = vFalse
	case 'n':
		k = vNull
	}
	return span{start: start, end: end, kind: k}
}

// memberName returns a member's decoded name: a sub-slice of b unless it is
// written with escapes, then decoded into scratch[:0].
func memberName(b []byte, m *jsonscan.Member, scratch []byte) []byte {
	name := m.RawName(b)
	if bytes.IndexByte(name, '\\') >= 0 {
		return jsonscan.AppendUnescaped(scratch[:0], name)
	}
	return name
}

// objIter iterates over the members of a validated JSON object.
type objIter struct {
	b  []byte
	it jsonscan.Members
}

// members starts an iteration over the object that begins at b[start] == '{'.
func (s *scanner) members(start int) objIter {
	return objIter{b: s.b, it: jsonscan.Object(s.b, start)}
}

// next returns the next member's decoded name and value; ok is false after
// the last one. The name is a sub-slice of the input unless it has escapes.
func (it *objIter) next() (name []byte, v span, ok bool) {
	m, ok := it.it.Next()
	if !ok {
		return nil, span{}, false
	}
	return memberName(it.b, &m, nil), spanAt(it.b, m.Value, m.End), true
}

// arrIter iterates over the elements of a validated JSON array.
type arrIter struct {
	b  []byte
	it jsonscan.Elements
}

// elements starts an iteration over the array that begins at b[start] == '['.
func (s *scanner) elements(start int) arrIter {
	return arrIter{b: s.b, it: jsonscan.Array(s.b, start)}
}

func (it *arrIter) next() (v span, ok bool) {
	start, end, ok := it.it.Next()
	if !ok {
		return span{}, false
	}
	return spanAt(it.b, start, end), true
}

// raw returns the value's bytes.
func (s *scanner) raw(v span) []byte { return s.b[v.start:v.end] }

// strEq reports whether the string value v decodes to lit.
func (s *scanner) strEq(v span, lit string) bool {
	return v.kind == vString && jsonscan.StringEquals(s.raw(v), lit)
}

// oneOf reports whether the string value v decodes to one of set.
func (s *scanner) oneOf(v span, set []string) bool {
	for _, x := range set {
		if s.strEq(v, x) {
			return true
		}
	}
	return false
}

// numberValue returns the value of a JSON number literal; one beyond the
// float64 range is ±Inf.
func numberValue(b []byte) float64 {
	x, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); !ok || ne.Err != strconv.ErrRange {
			return math.NaN()
		}
	}
	return x
}

// isIntegral reports whether a JSON number is an integer in JSON Schema's
// sense: no fractional part, however written (1, 1.0 and 1e2 all are).
func isIntegral(b []byte) bool {
	if isIntLiteral(b) {
		return true
	}
	x := numberValue(b)
	return !math.IsInf(x, 0) && x == math.Trunc(x)
}

// nonNegIntegral reports whether a JSON number is an integer >= 0.
func nonNegIntegral(b []byte) bool {
	return len(b) > 0 && (b[0] != '-' || numberValue(b) == 0) && isIntegral(b)
}
