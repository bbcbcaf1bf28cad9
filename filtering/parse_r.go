package filtering

import (
	"strconv"
	"strings"

	"github.com/aep-gateway/aep-gateway/aep"
)

// rStringKeys are the filterable dialect R core attributes holding strings
// (AEP-0003 §6.2 rule 1), with the routing attribute each reads.
var rStringKeys = map[string]field{
	"id":      fID,
	"subject": fSubject,
	"source":  fSource,
	"agent":   fAgent,
	"session": fSession,
	"run":     fRun,
	"step":    fStep,
	"cause":   fCause,
}

// rNotFilterable are core attributes a filter may not name (AEP-0003 §6.2
// rule 1; they are never legal extension names either).
var rNotFilterable = map[string]string{
	"aep":         "the version attribute is not filterable",
	"time":        "time is display metadata, not filterable",
	"seq":         "seq is a position, not a filter (resume with a cursor instead)",
	"traceparent": "traceparent is pass-through trace context, not filterable",
	"data":        "data is the payload; routing never parses it",
}

// ParseR compiles a dialect R attr-match filter (AEP-0003 §6) with
// DefaultLimits.
func ParseR(data []byte) (*Filter, error) { return DefaultLimits.ParseR(data) }

// ParseR compiles a dialect R attr-match filter under the limits l. A
// refused filter yields an *Error with code invalid-filter, or
// limit-exceeded when it is well-formed but over a limit.
func (l Limits) ParseR(data []byte) (*Filter, error) {
	l = l.withDefaults()
	v, msg := parseJSON(data, l)
	if msg != "" {
		return nil, rErr("", msg)
	}
	if v.kind != jObject {
		return nil, errR("", "filter must be a JSON object, not %s", v.kind)
	}
	if len(v.obj) > l.MaxMembers {
		return nil, errRLimit("", "limit: filter has more than %d members", l.MaxMembers)
	}
	b := rBuilder{lim: l, f: &Filter{dialect: aep.DialectR}}
	for _, m := range v.obj {
		if err := b.member(m.key, m.val); err != nil {
			return nil, err
		}
	}
	b.f.src = b.out.close()
	// Most selective string predicates first, as in dialect D.
	sortStrPreds(b.f.strs)
	return b.f, nil
}

func rErr(key, msg string) *Error {
	if isLimitMsg(msg) {
		return errRLimit(key, "%s", msg)
	}
	return errR(key, "%s", msg)
}

type rBuilder struct {
	lim   Limits
	f     *Filter
	total int
	out   objWriter
}

func (b *rBuilder) member(key string, v jval) error {
	if why, ok := rNotFilterable[key]; ok {
		return errR(key, "%s: %s", quote(key), why)
	}
	switch key {
	case "type":
		return b.typeMember(v)
	case "severity":
		return b.levelMember(key, v, severityLevels[:], &b.f.sevMask, true)
	case "capture":
		return b.levelMember(key, v, captureLevels[:], &b.f.capMask, false)
	case "epoch":
		return b.epochMember(v)
	}
	if f, ok := rStringKeys[key]; ok {
		return b.stringMember(key, f, v)
	}
	if !isExtName(key) {
		return errR(key, "%s is neither a filterable attribute nor a legal extension attribute name ([a-z0-9]{1,20})", quote(key))
	}
	return b.extMember(key, v)
}

// isExtName is AEP-0001 §5.4: [a-z0-9]{1,20}. Core names were handled
// before this is asked.
func isExtName(s string) bool {
	if len(s) == 0 || len(s) > 20 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// scalars reads a Scalar or a non-empty inclusion array of Scalars,
// canonical and deduplicated. Strings containing '*' are refused unless
// allowStar (globs exist only on "type").
func (b *rBuilder) scalars(key string, v jval, allowStar bool) ([]scalar, error) {
	var in []jval
	switch v.kind {
	case jArray:
		if len(v.arr) == 0 {
			return nil, errR(key, "%s: an inclusion array must not be empty", quote(key))
		}
		in = v.arr
	case jString, jNumber, jBool:
		in = []jval{v}
	default:
		return nil, errR(key, "%s: a predicate is a string, integer, boolean or a non-empty array of them, not %s", quote(key), v.kind)
	}
	if len(in) > b.lim.MaxValues {
		return nil, errRLimit(key, "limit: %s has more than %d values", quote(key), b.lim.MaxValues)
	}
	out := make([]scalar, 0, len(in))
	for _, e := range in {
		var s scalar
		switch e.kind {
		case jString:
			if len(e.s) > b.lim.MaxValueLen {
				return nil, errRLimit(key, "limit: a value of %s is longer than %d bytes", quote(key), b.lim.MaxValueLen)
			}
			if !allowStar && strings.IndexByte(e.s, '*') >= 0 {
				return nil, errR(key, "%s: %s: wildcards are only allowed in \"type\" patterns", quote(key), quote(e.s))
			}
			s = scalar{kind: kString, s: e.s}
		case jBool:
			s = scalar{kind: kBool, b: e.b}
		case jNumber:
			n, res := parseJSONInt([]byte(e.s))
			switch res {
			case intFraction:
				return nil, errR(key, "%s: %s is not an integer", quote(key), e.s)
			case intRange:
				return nil, errR(key, "%s: %s is outside the 64-bit integer range", quote(key), e.s)
			case intSyntax:
				return nil, errR(key, "%s: %s is not a JSON number", quote(key), e.s)
			}
			s = scalar{kind: kInt, i: n}
		default:
			return nil, errR(key, "%s: inclusion arrays hold strings, integers or booleans, not %s", quote(key), e.kind)
		}
		if !hasScalar(out, s) {
			out = append(out, s)
		}
	}
	b.total += len(out)
	if b.total > b.lim.MaxTotalValues {
		return nil, errRLimit(key, "limit: filter has more than %d values", b.lim.MaxTotalValues)
	}
	b.out.raw(key, scalarsJSON(out))
	return out, nil
}

func hasScalar(list []scalar, s scalar) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func scalarsJSON(vals []scalar) []byte {
	arr := []byte{'['}
	for i, v := range vals {
		if i > 0 {
			arr = append(arr, ',')
		}
		switch v.kind {
		case kString:
			arr = append(arr, jsonString(v.s)...)
		case kInt:
			arr = strconv.AppendInt(arr, v.i, 10)
		case kBool:
			arr = strconv.AppendBool(arr, v.b)
		}
	}
	return append(arr, ']')
}

// stringMember compiles a predicate on a string core attribute. Non-string
// scalars are valid (AEP-0003 §6.1) but equal no string without coercion,
// so they drop out; if none is left the filter can never match.
func (b *rBuilder) stringMember(key string, f field, v jval) error {
	vals, err := b.scalars(key, v, false)
	if err != nil {
		return err
	}
	var strs []string
	for _, s := range vals {
		if s.kind != kString {
			continue
		}
		if s.s == "" {
			return errR(key, "%s: the empty string is not a value (an absent attribute never matches)", quote(key))
		}
		strs = append(strs, s.s)
	}
	if len(strs) == 0 {
		b.f.never = true
		return nil
	}
	b.f.strs = append(b.f.strs, strPred{f: f, set: newStrSet(strs)})
	return nil
}

func (b *rBuilder) typeMember(v jval) error {
	vals, err := b.scalars("type", v, true)
	if err != nil {
		return err
	}
	b.f.hasTypes = true
	for _, s := range vals {
		if s.kind != kString {
			continue
		}
		p, msg := compileRPattern(s.s, b.lim)
		if msg != "" {
			if isLimitMsg(msg) {
				return errRLimit("type", "%s", msg)
			}
			return errR("type", `"type": %s`, msg)
		}
		b.f.types = append(b.f.types, p)
	}
	if len(b.f.types) == 0 {
		b.f.never = true
	}
	return nil
}

func (b *rBuilder) epochMember(v jval) error {
	vals, err := b.scalars("epoch", v, false)
	if err != nil {
		return err
	}
	b.f.hasEp = true
	for _, s := range vals {
		if s.kind == kInt {
			b.f.epochs = append(b.f.epochs, s.i)
		}
	}
	if len(b.f.epochs) == 0 {
		b.f.never = true
	}
	return nil
}

func (b *rBuilder) extMember(key string, v jval) error {
	vals, err := b.scalars(key, v, false)
	if err != nil {
		return err
	}
	b.f.ext = append(b.f.ext, extPred{name: key, vals: vals})
	return nil
}

// levelMember compiles severity (value, inclusion array, or {gte, lte}
// range when ranged) or capture (value or inclusion array) into a bit mask
// over the registry order. Values outside the registry are refused: they
// are not legal attribute values, so no conformant event could match.
func (b *rBuilder) levelMember(key string, v jval, levels []string, mask *uint8, ranged bool) error {
	if v.kind == jObject {
		if !ranged {
			return errR(key, "%s takes a level or an array of levels; ranges exist only on \"severity\"", quote(key))
		}
		return b.severityRange(v, mask)
	}
	vals, err := b.scalars(key, v, false)
	if err != nil {
		return err
	}
	for _, s := range vals {
		r := -1
		if s.kind == kString {
			r = levelIndex(levels, s.s)
		}
		if r < 0 {
			return errR(key, "%s: a value must be one of %s", quote(key), strings.Join(levels, ", "))
		}
		*mask |= 1 << r
	}
	return nil
}

func (b *rBuilder) severityRange(v jval, mask *uint8) error {
	lo, hi := 0, len(severityLevels)-1
	if len(v.obj) == 0 {
		return errR("severity", `"severity": a comparison needs "gte", "lte" or both`)
	}
	var o objWriter
	for _, m := range v.obj {
		if m.key != "gte" && m.key != "lte" {
			return errR("severity", `"severity": %s is not a comparison operator (only "gte" and "lte")`, quote(m.key))
		}
		r := -1
		if m.val.kind == jString {
			r = levelIndex(severityLevels[:], m.val.s)
		}
		if r < 0 {
			return errR("severity", `"severity": %s must be one of %s`, m.key, strings.Join(severityLevels[:], ", "))
		}
		if m.key == "gte" {
			lo = r
		} else {
			hi = r
		}
		o.raw(m.key, jsonString(m.val.s))
	}
	if lo > hi {
		return errR("severity", `"severity": the range is empty (gte is above lte)`)
	}
	for r := lo; r <= hi; r++ {
		*mask |= 1 << r
	}
	b.out.raw("severity", o.close())
	return nil
}

// sortStrPreds orders predicates by field, most selective first.
func sortStrPreds(p []strPred) {
	for i := 1; i < len(p); i++ {
		for j := i; j > 0 && p[j].f < p[j-1].f; j-- {
			p[j], p[j-1] = p[j-1], p[j]
		}
	}
}
