package aep

import (
	"strconv"
	"strings"

	"github.com/aep-gateway/aep-gateway/internal/jsonscan"
)

// Parse detects the dialect from the version attribute ("aep" => R,
// "aep_version" => D; both or neither is an error), validates the event
// against that dialect's envelope rules and returns its routing attributes.
//
// raw must hold exactly one JSON object (surrounding JSON whitespace is
// allowed, so an NDJSON line may keep its "\r"). Parse reads raw once, never
// modifies or retains it, and the strings and byte slices of the returned
// Attrs never alias it. The error, when not nil, is an *[Error]; while the
// dialect is unknown (malformed bytes, no or two version attributes) its
// Dialect is DialectUnknown and its Code is its Kind's name.
func Parse(raw []byte, lim Limits) (Attrs, error) {
	return parse(DialectUnknown, raw, lim)
}

// ParseAs is Parse for an endpoint that accepts dialect d only: every error,
// including malformed bytes, is in d's vocabulary, and an event of the other
// dialect is refused with a message naming the endpoint that takes it.
func ParseAs(d Dialect, raw []byte, lim Limits) (Attrs, error) {
	if d != DialectR && d != DialectD {
		return Attrs{}, &Error{Kind: KindDialect, Code: KindDialect.String(), Message: "ParseAs needs dialect R or D", Offset: -1}
	}
	return parse(d, raw, lim)
}

// Detect returns the dialect an event's version attribute names, without
// validating anything else. It is a cheap sniff for logs and tools; use
// Parse or ParseAs before trusting an event.
func Detect(raw []byte) Dialect {
	var p parser
	p.init(raw, Limits{})
	if p.scanTop() != nil {
		return DialectUnknown
	}
	r, d := p.idx[aAep] != 0, p.idx[aAepVersion] != 0
	switch {
	case r && !d:
		return DialectR
	case d && !r:
		return DialectD
	}
	return DialectUnknown
}

// Endpoints named in dialect-mismatch messages (DESIGN.md §1).
const (
	endpointR = "POST /events"
	endpointD = "POST /aep/events"
)

func parse(want Dialect, raw []byte, lim Limits) (Attrs, error) {
	var p parser
	p.init(raw, lim)
	if f := p.scanTop(); f != nil {
		return Attrs{}, f.toError(want)
	}
	d, f := p.detect(want)
	if f != nil {
		return Attrs{}, f.toError(want)
	}
	var a Attrs
	a.Dialect = d
	if d == DialectR {
		f = p.validateR(&a)
	} else {
		f = p.validateD(&a)
	}
	if f != nil {
		return Attrs{}, f.toError(d)
	}
	p.finish(&a)
	return a, nil
}

// parser is the scanner plus the routing attributes gathered by validation.
type parser struct {
	scanner

	outs [12]output
	nOut int
	nExt int // members marked ext
}

// output is a string attribute to copy into Attrs once validation passed.
type output struct {
	field outField
	val   []byte
}

// outField names a string field of Attrs (an index rather than a pointer, so
// that the Attrs being built stays on the stack).
type outField uint8

const (
	oID outField = iota
	oType
	oSource
	oSession
	oConversation
	oTask
	oTarget
	oTopic
	oAgent
	oSubject
	oRun
	oStep
	oSeverity
	oCapture
	oCause
	oCorrelation
	oCausation
	oDeliveryMode
	oNone // not routed
)

func (a *Attrs) setField(f outField, v string) {
	switch f {
	case oID:
		a.ID = v
	case oType:
		a.Type = v
	case oSource:
		a.Source = v
	case oSession:
		a.Session = v
	case oConversation:
		a.Conversation = v
	case oTask:
		a.Task = v
	case oTarget:
		a.Target = v
	case oTopic:
		a.Topic = v
	case oAgent:
		a.Agent = v
	case oSubject:
		a.Subject = v
	case oRun:
		a.Run = v
	case oStep:
		a.Step = v
	case oSeverity:
		a.Severity = v
	case oCapture:
		a.Capture = v
	case oCause:
		a.Cause = v
	case oCorrelation:
		a.Correlation = v
	case oCausation:
		a.Causation = v
	case oDeliveryMode:
		a.DeliveryMode = v
	}
}

func (p *parser) init(raw []byte, lim Limits) {
	p.b = raw
	p.lim = lim.WithDefaults()
	p.maxMem = int(numAttrs) + p.lim.MaxExtensions
}

func (p *parser) detect(want Dialect) (Dialect, *failure) {
	r, d := p.idx[aAep] != 0, p.idx[aAepVersion] != 0
	switch {
	case r && d:
		return 0, fail(KindDialect, "", `both "aep" (dialect R) and "aep_version" (dialect D) are present; an event has exactly one version attribute`)
	case !r && !d:
		switch want {
		case DialectR:
			return 0, fail(KindInvalid, "aep", `missing required attribute "aep" (AEP-0001 §5.1)`)
		case DialectD:
			return 0, fail(KindInvalid, "aep_version", "missing required field: aep_version")
		}
		return 0, fail(KindDialect, "", `no version attribute: want "aep" (dialect R) or "aep_version" (dialect D)`)
	case r && want == DialectD:
		return 0, fail(KindDialect, "aep", `this is a dialect R event (it carries "aep"); this endpoint takes dialect D events (aep_version); send R events to `+endpointR)
	case d && want == DialectR:
		return 0, fail(KindDialect, "aep_version", `this is a dialect D event (it carries "aep_version"); this endpoint takes dialect R events ("aep"); send D events to `+endpointD)
	case r:
		return DialectR, nil
	}
	return DialectD, nil
}

// get returns the member carrying attribute a, or nil.
func (p *parser) get(a attr) *member {
	if i := p.idx[a]; i != 0 {
		return p.mem(int(i) - 1)
	}
	return nil
}

// str returns the decoded bytes of string member m.
func (p *parser) str(m *member) []byte {
	if m.esc {
		return jsonscan.AppendUnescaped(nil, m.strBody(p.b))
	}
	return m.strBody(p.b)
}

func (p *parser) emit(f outField, val []byte) {
	p.outs[p.nOut] = output{f, val}
	p.nOut++
}

// finish copies the gathered strings and extension values into a with one
// allocation for all strings and one for all extension values.
func (p *parser) finish(a *Attrs) {
	n := 0
	for _, o := range p.outs[:p.nOut] {
		n += len(o.val)
	}
	nv := 0
	for k := 0; k < p.n && p.nExt > 0; k++ {
		if m := p.mem(k); m.ext {
			n += len(m.name)
			nv += m.end - m.start
		}
	}
	var sb strings.Builder
	sb.Grow(n)
	for _, o := range p.outs[:p.nOut] {
		sb.Write(o.val)
	}
	for k := 0; k < p.n && p.nExt > 0; k++ {
		if m := p.mem(k); m.ext {
			sb.Write(m.name)
		}
	}
	all := sb.String()
	off := 0
	for _, o := range p.outs[:p.nOut] {
		a.setField(o.field, all[off:off+len(o.val)])
		off += len(o.val)
	}
	if p.nExt == 0 {
		return
	}
	a.Ext = make([]Ext, p.nExt)
	vals := make([]byte, 0, nv)
	j := 0
	for k := 0; k < p.n; k++ {
		m := p.mem(k)
		if !m.ext {
			continue
		}
		a.Ext[j].Name = all[off : off+len(m.name)]
		off += len(m.name)
		s := len(vals)
		vals = p.appendExtValue(vals, m)
		a.Ext[j].Value = vals[s:len(vals):len(vals)]
		j++
	}
}

// appendExtValue appends the canonical JSON of a scalar extension value:
// strings per AppendJSONString, integers without a sign on zero, booleans.
// The canonical form is never longer than the raw value.
func (p *parser) appendExtValue(dst []byte, m *member) []byte {
	raw := m.raw(p.b)
	switch {
	case m.kind == vString && m.esc:
		return appendJSONStr(dst, jsonscan.AppendUnescaped(nil, m.strBody(p.b)))
	case m.kind == vNumber && string(raw) == "-0":
		return append(dst, '0')
	}
	return append(dst, raw...)
}

// isIntLiteral reports whether a JSON number's bytes are an integer literal
// (no fraction, no exponent).
func isIntLiteral(b []byte) bool {
	for _, c := range b {
		if c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	return true
}

// nonNegInt parses a non-negative integer literal that fits in int64.
func nonNegInt(b []byte) (int64, bool) {
	if len(b) == 0 || b[0] == '-' || !isIntLiteral(b) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	return n, err == nil
}
