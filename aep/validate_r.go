package aep

import "strconv"

// Dialect R envelope rules: AEP-0001 §5 and §6, schemas/aep-event.schema.json.

// categoriesR is the closed category set of 0.1 (AEP-0002 §3,
// schemas/registry/categories.json); "x" is the vendor namespace.
var categoriesR = [...]string{
	"agent", "session", "run", "progress", "tool", "delegation", "attention",
	"resource", "error", "state", "assessment", "message", "control",
}

// commandTypesR are the registered foreign-emitter session types: the
// commands of AEP-0004 §2.2 and attention.routed (AEP-0002 §7.3). They carry
// session and omit seq (AEP-0001 §5.2); x.{vendor}.control.* joins them.
var commandTypesR = [...]string{
	"control.attention.respond", "control.cancel", "control.pause", "control.resume", "attention.routed",
}

var severitiesR = [...]string{"debug", "info", "notice", "warning", "error", "critical"}

var capturesR = [...]string{"none", "metadata", "redacted", "full"}

func (p *parser) validateR(a *Attrs) *failure {
	// The version first: a client speaking another version learns that
	// before anything else.
	v := p.get(aAep)
	if v.kind != vString {
		return fail(KindInvalid, "aep", `must be a string such as "0.1", not `+v.kind.String())
	}
	if s := p.str(v); !VersionSupported(DialectR, string(s)) {
		return fail(KindVersion, "aep", "unsupported envelope version "+quoteTrunc(s)+"; this gateway accepts "+listOf(versionsR[:])+" (AEP-0001 §5.1 #1)")
	}
	var typ []byte
	for i := 0; i < p.n; i++ {
		m := p.mem(i)
		if m.kind == vNull {
			return fail(KindInvalid, string(m.name), "must not be null: an absent attribute is omitted (AEP-0001 §5.1)")
		}
		if !m.attr.isR() {
			if f := p.extensionR(m); f != nil {
				return f
			}
			m.ext = true
			p.nExt++
			continue
		}
		var f *failure
		switch m.attr {
		case aID:
			f = p.nonEmptyR(m, oID)
		case aSubject:
			f = p.nonEmptyR(m, oSubject)
		case aAgent:
			f = p.nonEmptyR(m, oAgent)
		case aSession:
			f = p.nonEmptyR(m, oSession)
		case aRun:
			f = p.nonEmptyR(m, oRun)
		case aStep:
			f = p.nonEmptyR(m, oStep)
		case aCause:
			f = p.nonEmptyR(m, oCause)
		case aType:
			if f = wantKind(m, vString, "a string"); f == nil {
				typ = p.str(m)
				if f = checkTypeR(typ); f == nil {
					p.emit(oType, typ)
				}
			}
		case aTime:
			if f = wantKind(m, vString, "a string"); f == nil && !validDateTime(p.str(m)) {
				f = fail(KindInvalid, "time", "must be an RFC 3339 date-time with a time zone, such as 2026-07-03T10:15:04.221Z (AEP-0001 §5.1 #5); got "+quoteTrunc(p.str(m)))
			}
		case aSource:
			if f = p.nonEmptyR(m, oSource); f == nil && !validURI(p.str(m)) {
				f = fail(KindInvalid, "source", "must be an absolute URI such as aep://host/agent/name/session/id (AEP-0001 §5.1 #6); got "+quoteTrunc(p.str(m)))
			}
		case aSeq:
			a.Seq, a.HasSeq, f = p.counterR(m)
		case aEpoch:
			a.Epoch, a.HasEpoch, f = p.counterR(m)
		case aTraceparent:
			if f = wantKind(m, vString, "a string"); f == nil && !validTraceparent(p.str(m)) {
				f = fail(KindInvalid, "traceparent", "must be a W3C Trace Context traceparent such as 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 (AEP-0001 §5.1 #14); got "+quoteTrunc(p.str(m)))
			}
		case aSeverity:
			f = p.enumR(m, severitiesR[:], oSeverity, "AEP-0001 §8.1")
		case aCapture:
			f = p.enumR(m, capturesR[:], oCapture, "AEP-0001 §8.2")
		case aData:
			f = wantKind(m, vObject, "an object (AEP-0001 §5.1 #17)")
		}
		if f != nil {
			return f
		}
	}
	for _, r := range [...]attr{aID, aType, aTime, aSource, aAgent} {
		if p.idx[r] == 0 {
			return fail(KindInvalid, attrName(r), "missing required attribute "+strconv.Quote(attrName(r))+" (AEP-0001 §5.1)")
		}
	}
	if p.nExt > p.lim.MaxExtensions {
		return fail(KindLimit, "", strconv.Itoa(p.nExt)+" extension attributes, over the limit of "+strconv.Itoa(p.lim.MaxExtensions))
	}
	if f := p.scopeR(typ); f != nil {
		return f
	}
	if p.lim.ValidatePayloads {
		return p.payloadR(typ)
	}
	return nil
}

// scopeR applies the session/seq rules of AEP-0001 §5.2 by the type's scope.
func (p *parser) scopeR(typ []byte) *failure {
	switch {
	case len(typ) > 6 && string(typ[:6]) == "agent.":
		for _, r := range [...]attr{aSession, aRun, aStep, aSeq} {
			if p.idx[r] != 0 {
				return fail(KindInvalid, attrName(r), "an agent-scoped event ("+quoteTrunc(typ)+") must omit "+attrName(r)+" (AEP-0001 §5.2)")
			}
		}
	case isForeignEmitterR(typ):
		if p.idx[aSession] == 0 {
			return fail(KindInvalid, "session", "missing required attribute \"session\": a command or attention.routed event names the session it addresses (AEP-0001 §5.2, AEP-0004 §2.2)")
		}
		if p.idx[aSeq] != 0 {
			return fail(KindInvalid, "seq", "a foreign-emitter session event ("+quoteTrunc(typ)+") must omit seq: its sender does not own the session's order (AEP-0001 §5.2, AEP-0004 §2.2)")
		}
	default:
		if p.idx[aSession] == 0 {
			return fail(KindInvalid, "session", "missing required attribute \"session\": a session-scoped event carries session and seq (AEP-0001 §5.2)")
		}
		if p.idx[aSeq] == 0 {
			return fail(KindInvalid, "seq", "missing required attribute \"seq\": a session-scoped event carries session and seq (AEP-0001 §5.2)")
		}
	}
	return nil
}

// isForeignEmitterR reports whether a valid R type is a command,
// attention.routed, or a vendor command x.{vendor}.control.{rest}.
func isForeignEmitterR(typ []byte) bool {
	for _, t := range commandTypesR {
		if string(typ) == t {
			return true
		}
	}
	if len(typ) < 2 || typ[0] != 'x' || typ[1] != '.' {
		return false
	}
	rest := typ[2:]
	for i, c := range rest {
		if c == '.' {
			rest = rest[i+1:]
			return len(rest) > len("control.") && string(rest[:len("control.")]) == "control."
		}
	}
	return false
}

// checkTypeR validates the type grammar of AEP-0001 §6 as the envelope
// schema pins it: {category}.{rest} with a registered category and
// [a-z0-9_]+ tokens, or x.{vendor}.{category}.{rest} with a [a-z0-9_-]+
// vendor token.
func checkTypeR(t []byte) *failure {
	bad := func(why string) *failure {
		return fail(KindInvalid, "type", "type "+quoteTrunc(t)+" "+why+" (AEP-0001 §6)")
	}
	var tok [4][]byte // the first tokens
	n, start := 0, 0
	for i := 0; i <= len(t); i++ {
		if i < len(t) && t[i] != '.' {
			continue
		}
		w := t[start:i]
		if len(w) == 0 {
			return bad("has an empty segment")
		}
		vendor := n == 1 && len(tok[0]) == 1 && tok[0][0] == 'x'
		for _, c := range w {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || (vendor && c == '-')) {
				return bad("has a character outside [a-z0-9_] in segment " + quoteTrunc(w))
			}
		}
		if n < len(tok) {
			tok[n] = w
		}
		n++
		start = i + 1
	}
	if string(tok[0]) == "x" {
		if n < 4 {
			return bad("is a vendor type, which needs x.{vendor}.{category}.{rest}")
		}
		return nil
	}
	if n < 2 {
		return bad("needs {category}.{rest}")
	}
	for _, c := range categoriesR {
		if string(tok[0]) == c {
			return nil
		}
	}
	return fail(KindInvalid, "type", "type "+quoteTrunc(t)+" has unknown category "+quoteTrunc(tok[0])+"; the 0.1 categories are a closed set (AEP-0002 §3), vendor types use x.{vendor}.{category}.{rest}")
}

func wantKind(m *member, k valKind, what string) *failure {
	if m.kind != k {
		return fail(KindInvalid, string(m.name), "must be "+what+", not "+m.kind.String())
	}
	return nil
}

// nonEmptyR checks a non-empty string attribute and routes it to dst.
func (p *parser) nonEmptyR(m *member, dst outField) *failure {
	if f := wantKind(m, vString, "a non-empty string (AEP-0001 §5.1)"); f != nil {
		return f
	}
	if m.end-m.start == 2 {
		return fail(KindInvalid, string(m.name), "must not be empty (AEP-0001 §5.1)")
	}
	if dst != oNone {
		p.emit(dst, p.str(m))
	}
	return nil
}

// counterR checks seq or epoch: a non-negative integer (AEP-0001 §5.1 #11,
// #12), written as an integer literal that fits in int64.
func (p *parser) counterR(m *member) (int64, bool, *failure) {
	if m.kind == vNumber {
		if n, ok := nonNegInt(m.raw(p.b)); ok {
			return n, true, nil
		}
	}
	return 0, false, fail(KindInvalid, string(m.name), "must be a non-negative integer literal up to 2^63-1 (AEP-0001 §5.1); got "+quoteTrunc(m.raw(p.b)))
}

func (p *parser) enumR(m *member, set []string, dst outField, ref string) *failure {
	if m.kind == vString {
		v := p.str(m)
		for _, s := range set {
			if string(v) == s {
				p.emit(dst, v)
				return nil
			}
		}
	}
	return fail(KindInvalid, string(m.name), "must be one of "+listOf(set)+" ("+ref+"); got "+quoteTrunc(m.raw(p.b)))
}

// extensionR checks an extension attribute (AEP-0001 §5.4): a name of
// [a-z0-9]{1,20} and a string, integer or boolean value.
func (p *parser) extensionR(m *member) *failure {
	if !validExtName(m.name) {
		msg := "attribute " + quoteTrunc(m.name) + " is neither a core attribute nor a legal extension attribute name [a-z0-9]{1,20} (AEP-0001 §5.4)"
		if m.attr.isD() {
			msg += "; it is a dialect D envelope member: send D events (aep_version) to " + endpointD
		}
		return fail(KindInvalid, string(m.name), msg)
	}
	switch m.kind {
	case vString:
		if m.end-m.start-2 > p.lim.MaxStringBytes { // "payload" skipped the scan's check
			return fail(KindLimit, string(m.name), "value of "+quoteTrunc(m.name)+" longer than "+strconv.Itoa(p.lim.MaxStringBytes)+" bytes")
		}
		return nil
	case vTrue, vFalse:
		return nil
	case vNumber:
		if isIntLiteral(m.raw(p.b)) {
			return nil
		}
		return fail(KindInvalid, string(m.name), "extension attribute "+quoteTrunc(m.name)+" must be a string, integer or boolean (AEP-0001 §5.4); got the non-integer number "+quoteTrunc(m.raw(p.b)))
	}
	return fail(KindInvalid, string(m.name), "extension attribute "+quoteTrunc(m.name)+" must be a string, integer or boolean (AEP-0001 §5.4), not "+m.kind.String())
}

func validExtName(b []byte) bool {
	if len(b) == 0 || len(b) > 20 {
		return false
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func listOf(set []string) string {
	s := "["
	for i, v := range set {
		if i > 0 {
			s += " "
		}
		s += v
	}
	return s + "]"
}
