package filtering

import (
	"strings"
)

// patKind says how a compiled type pattern is evaluated.
type patKind uint8

const (
	patAll    patKind = iota // D "*": every type
	patExact                 // no wildcard: string equality
	patPrefix                // "p.*" with no inner wildcard: strict prefix "p." plus at least one byte
	patSegs                  // D inner "*" segments, with or without a trailing ".*"
)

// typePattern is one compiled type pattern. segs and tail describe it as a
// path for the index trie: the segments to walk (a "*" segment matches one
// non-empty segment) and whether a trailing ".*" follows them.
type typePattern struct {
	raw  string
	kind patKind
	pfx  string // patPrefix: raw without its final '*', so it ends in '.'
	segs []string
	tail bool
}

// match reports whether the event type t matches the pattern. It never
// allocates.
func (p *typePattern) match(t string) bool {
	switch p.kind {
	case patAll:
		return true
	case patExact:
		return t == p.raw
	case patPrefix:
		return len(t) > len(p.pfx) && t[:len(p.pfx)] == p.pfx
	}
	return matchSegs(p.segs, p.tail, t)
}

// matchSegs walks t segment by segment. A "*" segment matches exactly one
// non-empty segment; with tail, at least one more non-empty remainder must
// follow the matched segments after a '.'.
func matchSegs(segs []string, tail bool, t string) bool {
	pos := 0
	last := len(segs) - 1
	for k, s := range segs {
		end := strings.IndexByte(t[pos:], '.')
		if end < 0 {
			end = len(t)
		} else {
			end += pos
		}
		seg := t[pos:end]
		if s == "*" {
			if seg == "" {
				return false
			}
		} else if seg != s {
			return false
		}
		if k == last && !tail {
			return end == len(t)
		}
		if end == len(t) {
			return false
		}
		pos = end + 1
	}
	return pos < len(t)
}

// compileDPattern compiles a dialect D type pattern (seed 000): "*" alone, or
// non-empty segments where a segment is either "*" (exactly one segment) or
// contains no '*' at all; a final "*" segment after at least one other
// segment is the trailing ".*" (one or more trailing segments). It returns a
// message saying what is wrong, or "".
func compileDPattern(s string, lim Limits) (typePattern, string) {
	if s == "*" {
		return typePattern{raw: s, kind: patAll}, ""
	}
	if msg := checkValue(s, lim); msg != "" {
		return typePattern{}, msg
	}
	segs := strings.Split(s, ".")
	if len(segs) > lim.MaxSegments {
		return typePattern{}, "limit: type pattern has more than " + itoa(lim.MaxSegments) + " segments"
	}
	stars := 0
	for _, seg := range segs {
		switch {
		case seg == "":
			return typePattern{}, "type pattern " + quote(s) + " has an empty segment"
		case seg == "*":
			stars++
		case strings.IndexByte(seg, '*') >= 0:
			return typePattern{}, "type pattern " + quote(s) + ": '*' must be a whole segment"
		}
	}
	p := typePattern{raw: s, segs: segs}
	if segs[len(segs)-1] == "*" {
		p.tail = true
		p.segs = segs[:len(segs)-1]
		stars--
	}
	switch {
	case stars == 0 && !p.tail:
		p.kind = patExact
	case stars == 0:
		p.kind = patPrefix
		p.pfx = s[:len(s)-1]
	default:
		p.kind = patSegs
	}
	return p, ""
}

// compileRPattern compiles a dialect R type value (AEP-0003 §6.2 rule 3): an
// exact type, or a prefix followed by ".*" whose prefix is dot-separated
// tokens of [a-z0-9_-] (the conformance runner's grammar). A bare "*" and any
// other use of '*' are refused. It returns a message, or "".
func compileRPattern(s string, lim Limits) (typePattern, string) {
	if msg := checkValue(s, lim); msg != "" {
		return typePattern{}, msg
	}
	segs := strings.Split(s, ".")
	if len(segs) > lim.MaxSegments {
		return typePattern{}, "limit: type pattern has more than " + itoa(lim.MaxSegments) + " segments"
	}
	if strings.IndexByte(s, '*') < 0 {
		return typePattern{raw: s, kind: patExact, segs: segs}, ""
	}
	if s == "*" {
		return typePattern{}, `"*" alone is not a type pattern (omit "type" or use {} to match every type)`
	}
	if len(segs) < 2 || segs[len(segs)-1] != "*" {
		return typePattern{}, "type pattern " + quote(s) + ": '*' is only allowed as a trailing \".*\""
	}
	for _, seg := range segs[:len(segs)-1] {
		if seg == "" || !isRPatternToken(seg) {
			return typePattern{}, "type pattern " + quote(s) + ": prefix segments must be non-empty [a-z0-9_-] tokens"
		}
	}
	return typePattern{raw: s, kind: patPrefix, pfx: s[:len(s)-1], segs: segs[:len(segs)-1], tail: true}, ""
}

func isRPatternToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
