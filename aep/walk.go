package aep

import (
	"math"
	"strconv"
)

// Walking nested values that the scan has already validated: the delivery
// member of a D event and, with payload validation on, the data of a
// registered R type. The bytes are known to be valid JSON, so the walk only
// finds spans; it does not check syntax again.

// span is one JSON value of the input: b[start:end], of the given kind.
type span struct {
	start, end int
	kind       valKind
}

// objIter iterates over the members of a validated JSON object.
type objIter struct {
	s *scanner
	i int // index of the next member name, or of the closing '}'
}

// members starts an iteration over the object that begins at b[start] == '{'.
func (s *scanner) members(start int) objIter {
	return objIter{s: s, i: s.skipWS(start + 1)}
}

// next returns the next member's decoded name and value; ok is false after
// the last one. The name is a sub-slice of the input unless it has escapes.
func (it *objIter) next() (name []byte, v span, ok bool) {
	b := it.s.b
	if it.i >= len(b) || b[it.i] != '"' {
		return nil, span{}, false
	}
	kend, kesc, _ := it.s.scanString(it.i)
	name = b[it.i+1 : kend-1]
	if kesc {
		name = appendUnescaped(nil, name)
	}
	v = it.s.valueAt(it.s.skipWS(it.s.skipWS(kend) + 1))
	it.i = it.s.skipWS(v.end)
	if it.i < len(b) && b[it.i] == ',' {
		it.i = it.s.skipWS(it.i + 1)
	}
	return name, v, true
}

// arrIter iterates over the elements of a validated JSON array.
type arrIter struct {
	s *scanner
	i int
}

// elements starts an iteration over the array that begins at b[start] == '['.
func (s *scanner) elements(start int) arrIter {
	return arrIter{s: s, i: s.skipWS(start + 1)}
}

func (it *arrIter) next() (v span, ok bool) {
	b := it.s.b
	if it.i >= len(b) || b[it.i] == ']' {
		return span{}, false
	}
	v = it.s.valueAt(it.i)
	it.i = it.s.skipWS(v.end)
	if it.i < len(b) && b[it.i] == ',' {
		it.i = it.s.skipWS(it.i + 1)
	}
	return v, true
}

// valueAt returns the span of the validated value at b[i]. The scan already
// enforced MaxDepth, so the depth given to skipValue starts far below it.
func (s *scanner) valueAt(i int) span {
	end, kind, _ := s.skipValue(i, -1<<30)
	return span{start: i, end: end, kind: kind}
}

// raw returns the value's bytes.
func (s *scanner) raw(v span) []byte { return s.b[v.start:v.end] }

// strEq reports whether the string value v decodes to lit.
func (s *scanner) strEq(v span, lit string) bool {
	if v.kind != vString {
		return false
	}
	body := s.b[v.start+1 : v.end-1]
	if string(body) == lit {
		return true
	}
	for _, c := range body {
		if c == '\\' {
			return string(appendUnescaped(nil, body)) == lit
		}
	}
	return false
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
