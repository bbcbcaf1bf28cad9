package aep

import (
	"bytes"
	"strconv"

	"github.com/aep-gateway/aep-gateway/internal/jsonscan"
)

// Dialect R capture levels and down-leveling at fan-out: AEP-0001 §8.2,
// AEP-0002 §5.1 and §5.3, AEP-0003 §6.4. docs/dialects.md "Capture ceilings"
// records the choices made where the specification is silent.

// Capture is a dialect R content-capture level (AEP-0001 §8.2), ordered
// CaptureNone < CaptureMetadata < CaptureRedacted < CaptureFull
// (schemas/registry/capture.json). The zero value is no level at all: it is
// neither an event's capture (an absent attribute means CaptureMetadata,
// see [EventCapture]) nor a subscription ceiling (an absent ceiling means
// "as stored", which is CaptureFull), and [Downlevel] refuses it, so a
// forgotten ceiling fails closed.
type Capture uint8

const (
	CaptureNone Capture = iota + 1
	CaptureMetadata
	CaptureRedacted
	CaptureFull
)

// DefaultCapture is the level of an event without a capture attribute
// (AEP-0001 §5.1 #16).
const DefaultCapture = CaptureMetadata

var captureNames = [...]string{"", "none", "metadata", "redacted", "full"}

// String returns the level's wire name, or "" for the zero value and
// anything out of range.
func (c Capture) String() string {
	if int(c) < len(captureNames) {
		return captureNames[c]
	}
	return ""
}

// Valid reports whether c is one of the four levels.
func (c Capture) Valid() bool { return c >= CaptureNone && c <= CaptureFull }

// ParseCapture parses a wire name: "none", "metadata", "redacted" or
// "full". Anything else, including "", is false: the meaning of an absent
// level depends on where it is absent (event or subscription).
func ParseCapture(s string) (Capture, bool) {
	switch s {
	case "none":
		return CaptureNone, true
	case "metadata":
		return CaptureMetadata, true
	case "redacted":
		return CaptureRedacted, true
	case "full":
		return CaptureFull, true
	}
	return 0, false
}

// EventCapture returns the capture level a dialect R event declares in its
// routing attributes, with the AEP-0001 §5.1 default (metadata) applied when
// the attribute is absent. It returns 0 for a D event (D has no capture
// levels) and for a value that is not a level, which a validated R event
// never carries.
func EventCapture(a *Attrs) Capture {
	if a.Dialect != DialectR {
		return 0
	}
	if a.Capture == "" {
		return DefaultCapture
	}
	c, _ := ParseCapture(a.Capture)
	return c
}

// NeedsDownlevel reports, from the routing attributes alone, whether
// [Downlevel] would rewrite the event for a consumer with this ceiling: true
// when a dialect R event's capture level is above the ceiling. A relay calls
// it on the Kafka headers and parses the value only when it says true. It is
// false for dialect D events, which carry no capture level. It is true when
// it cannot decide (an invalid ceiling, an R capture value that is not a
// level), so that Downlevel gets to refuse the event and fan-out fails
// closed.
//
// The specification has no delivery gate: an event above a consumer's ceiling
// is delivered down-leveled (AEP-0003 §6.4 "MUST down-level delivered
// Events"), never withheld, so there is no "deliver or not" decision here.
func NeedsDownlevel(a *Attrs, ceiling Capture) bool {
	if a.Dialect != DialectR {
		return false
	}
	c := EventCapture(a)
	return !ceiling.Valid() || c == 0 || c > ceiling
}

// Downlevel rewrites a dialect R event for a consumer whose capture ceiling
// is ceiling (AEP-0003 §6.4), by the rules of AEP-0001 §8.2 and AEP-0002
// §5.1:
//
//   - An event at or below the ceiling is returned as is: out is raw itself,
//     changed is false. Down-leveling never up-levels. So is a dialect D
//     event, which has no capture levels.
//   - Otherwise the new level is the ceiling, except that a full event at a
//     redacted ceiling lands on metadata: redacted is a provenance claim a
//     mechanical hop cannot mint (AEP-0001 §8.2(e)). The capture attribute
//     is rewritten in place, or appended when it was absent (absent means
//     metadata, so only a none ceiling appends it).
//   - At none, data is removed. Otherwise every data field whose
//     x-aep-capture annotation (schemas/types/{type}.schema.json) is above
//     the new level is removed, at any depth, including inside arrays of
//     objects (documents[].content). Digests (result_digest, args_digest,
//     query_digest) are annotated metadata and are kept as they are.
//   - Below redacted, the AEP-0002 §5.3 [metadata*] fields degrade
//     structurally: attention.requested prompt becomes
//     "{agent} requests {kind}: {subject}" (AEP-0003 §9.2), option, field and
//     choice labels become their ids, and answer.values of attention.answered
//     and control.attention.respond keep only number and boolean entries.
//   - A type without annotations (vendor types, types whose schema names no
//     field, unknown types) loses data wholesale: the hop cannot tell content
//     from structure, and dropping more is always legal (AEP-0001 §8.2(b)).
//   - A value whose shape contradicts its schema where fields beneath it are
//     gated (a string where an object with a gated member is expected) is
//     removed rather than copied.
//
// Every other member keeps its bytes and its position; the output is compact
// JSON only inside the data objects that were rewritten. raw must be one JSON
// object; it is scanned under lim (zero means the defaults) but not
// validated as an R event beyond what down-leveling needs, because it was
// validated at ingest. The error is an *[Error]: malformed bytes, a capture
// value that is not a level, no version attribute, or an invalid ceiling. A
// relay that gets an error must not deliver the event.
//
// Downlevel never modifies raw; out is freshly allocated when changed.
func Downlevel(raw []byte, ceiling Capture, lim Limits) (out []byte, changed bool, err error) {
	if !ceiling.Valid() {
		return nil, false, &Error{Dialect: DialectR, Kind: KindInvalid, Code: CodeRInvalidEvent, Message: "capture ceiling " + strconv.Itoa(int(ceiling)) + " is not a level (pass CaptureFull for \"as stored\")", Field: "capture", Offset: -1}
	}
	var p parser
	p.init(raw, lim)
	if f := p.scanTop(); f != nil {
		return nil, false, f.toError(DialectR)
	}
	if p.idx[aAep] == 0 {
		if p.idx[aAepVersion] != 0 {
			return raw, false, nil
		}
		return nil, false, fail(KindDialect, "aep", `no "aep" attribute: not a dialect R event`).toError(DialectR)
	}
	level := DefaultCapture
	capM := p.get(aCapture)
	if capM != nil {
		var ok bool
		if capM.kind == vString {
			level, ok = ParseCapture(string(p.str(capM)))
		}
		if !ok {
			return nil, false, fail(KindInvalid, "capture", "must be one of "+listOf(capturesR[:])+" (AEP-0001 §8.2); got "+quoteTrunc(capM.raw(raw))).toError(DialectR)
		}
	}
	if level <= ceiling {
		return raw, false, nil
	}
	target := ceiling
	if ceiling == CaptureRedacted && level == CaptureFull {
		target = CaptureMetadata // AEP-0001 §8.2(e)
	}
	return p.downlevel(target), true, nil
}

// downlevel splices the new capture value and the pruned data into a copy of
// the event.
func (p *parser) downlevel(target Capture) []byte {
	b := p.b
	out := make([]byte, 0, len(b)+24)
	pos := 0 // input copied up to here

	dataIdx := int(p.idx[aData]) - 1
	capIdx := int(p.idx[aCapture]) - 1
	removed := false
	for k := 0; k < p.n; k++ {
		switch k {
		case capIdx:
			m := p.mem(k)
			out = append(out, b[pos:m.start]...)
			out = append(out, '"')
			out = append(out, target.String()...)
			out = append(out, '"')
			pos = m.end
		case dataIdx:
			m := p.mem(k)
			var node *gateNode
			keep := target > CaptureNone && m.kind == vObject
			if keep {
				if typ := p.get(aType); typ != nil && typ.kind == vString {
					node = gateTypes[string(p.str(typ))]
				}
				keep = node != nil
			}
			if keep {
				out = append(out, b[pos:m.start]...)
				w := pruner{b: b, out: out, target: target, data: m.start}
				if node == gateTypes["attention.requested"] {
					w.agent, w.subject = p.strAttr(aAgent), p.strAttr(aSubject)
				}
				w.object(m.start, node)
				out = w.out
				pos = m.end
				continue
			}
			// Remove the member with one adjacent comma.
			removed = true
			prevEnd, next := -1, -1
			if k > 0 {
				prevEnd = p.mem(k - 1).end
			}
			if k+1 < p.n {
				next = p.nameStart(k + 1)
			}
			from, to := jsonscan.CutMember(prevEnd, p.nameStart(k), m.end, next)
			out = append(out, b[pos:from]...)
			pos = to
		}
	}
	if capIdx < 0 {
		// Absent capture means metadata; the new level is below it. Append
		// the member before the closing brace.
		end := len(b) - 1
		for b[end] != '}' {
			end--
		}
		out = append(out, b[pos:end]...)
		if left := p.n; left > 1 || (left == 1 && !removed) {
			out = append(out, ',')
		}
		out = append(out, `"capture":"`...)
		out = append(out, target.String()...)
		out = append(out, '"')
		pos = end
	}
	return append(out, b[pos:]...)
}

// strAttr returns the decoded value of a string attribute, or nil.
func (p *parser) strAttr(a attr) []byte {
	if m := p.get(a); m != nil && m.kind == vString {
		return p.str(m)
	}
	return nil
}

// nameStart returns the offset of the opening quote of member k's name.
func (p *parser) nameStart(k int) int {
	if k == 0 {
		return p.skipWS(p.skipWS(0) + 1)
	}
	i := p.skipWS(p.mem(k - 1).end) // at the ','
	return p.skipWS(i + 1)
}

// gateNode holds the capture gates of the members of an object value
// (members) or of the elements of an array value (items). Members not named
// are metadata (AEP-0002 §5.1 rule 4) and are copied.
type gateNode struct {
	members []gateEdge
	items   *gateNode
}

// gateEdge is one annotated member: the minimum level at which it may be
// present, the gates beneath it, and its structural degradation below
// redacted, if any.
type gateEdge struct {
	name    string
	level   Capture
	node    *gateNode
	degrade degrade
}

// degrade names the AEP-0002 §5.3 [metadata*] exceptions: members that stay
// at metadata but whose content must be structural there.
type degrade uint8

const (
	dgNone    degrade = iota
	dgPrompt          // attention.requested prompt: synthesized (AEP-0003 §9.2)
	dgOptions         // [{id, label}]: label := id
	dgFields          // [field_spec]: label := id, choices[].label := id
	dgValues          // answer.values: number and boolean entries only
)

func (n *gateNode) edge(name []byte) *gateEdge {
	for i := range n.members {
		if n.members[i].name == string(name) {
			return &n.members[i]
		}
	}
	return nil
}

// gated reports whether anything beneath n can change a value.
func (n *gateNode) gated() bool { return n != nil && (len(n.members) > 0 || n.items != nil) }

// gateTypes are the capture annotations of the payload schemas,
// schemas/types/{type}.schema.json of agenteventprotocol/agent-event-protocol
// at 1d959a0, reduced to the members that are not metadata and the path to
// them, plus the hand-written [metadata*] exceptions of AEP-0002 §5.3. A type
// is present when its schema names at least one property (the conformance
// runner's rule); testdata/r-capture-annotations.json holds every annotation
// and a test checks this table against it.
var gateTypes = map[string]*gateNode{
	"agent.health":                   {members: []gateEdge{{name: "detail", level: CaptureRedacted}}},
	"agent.heartbeat":                {},
	"agent.idle":                     {},
	"agent.presence":                 {},
	"assessment.evaluation.recorded": {members: []gateEdge{{name: "gen_ai.evaluation.explanation", level: CaptureRedacted}}},
	"assessment.feedback.received":   {members: []gateEdge{{name: "comment", level: CaptureRedacted}, {name: "correction", level: CaptureRedacted}}},
	"assessment.guardrail.recorded":  {members: []gateEdge{{name: "guardrail", level: CaptureMetadata, node: msgNode("explanation")}}},
	"attention.answered":             {members: answerEdges},
	"attention.requested": {members: []gateEdge{
		{name: "prompt", level: CaptureMetadata, degrade: dgPrompt},
		{name: "options", level: CaptureMetadata, degrade: dgOptions},
		{name: "fields", level: CaptureMetadata, degrade: dgFields},
		{name: "context", level: CaptureFull},
	}},
	"attention.resolved":          {},
	"attention.routed":            {},
	"attention.timeout":           {},
	"control.attention.respond":   {members: answerEdges},
	"control.cancel":              {members: []gateEdge{{name: "reason", level: CaptureRedacted}}},
	"control.rejected":            {members: []gateEdge{{name: "detail", level: CaptureRedacted}}},
	"delegation.subagent.started": {},
	"delegation.subagent.stopped": {},
	"error.raised":                {members: errorEdges},
	"progress.artifact.produced": {members: []gateEdge{{name: "artifact", level: CaptureMetadata, node: &gateNode{members: []gateEdge{
		{name: "name", level: CaptureRedacted}, {name: "uri", level: CaptureRedacted},
	}}}}},
	"progress.status":         {members: []gateEdge{{name: "message", level: CaptureRedacted}}},
	"progress.task.completed": {members: []gateEdge{{name: "task", level: CaptureMetadata, node: msgNode("title")}}},
	"progress.task.planned":   {members: []gateEdge{{name: "task", level: CaptureMetadata, node: msgNode("title")}}},
	"resource.citation.recorded": {members: []gateEdge{{name: "citations", level: CaptureMetadata, node: &gateNode{items: &gateNode{members: []gateEdge{
		{name: "source", level: CaptureMetadata, node: &gateNode{members: []gateEdge{{name: "uri", level: CaptureRedacted}, {name: "title", level: CaptureRedacted}}}},
		{name: "cited_text_redacted", level: CaptureRedacted},
		{name: "cited_text", level: CaptureFull},
	}}}}}},
	"resource.retrieval.requested": {members: []gateEdge{{name: "query", level: CaptureRedacted}}},
	"resource.retrieval.reranked": {members: []gateEdge{
		{name: "query", level: CaptureRedacted},
		{name: "input_documents", level: CaptureMetadata, node: documentsNode},
		{name: "output_documents", level: CaptureMetadata, node: documentsNode},
	}},
	"resource.retrieval.returned": {members: []gateEdge{{name: "documents", level: CaptureMetadata, node: documentsNode}}},
	"run.cancelled":               {members: []gateEdge{{name: "reason", level: CaptureRedacted}}},
	"run.failed":                  {members: errorEdges},
	"run.finished":                {members: []gateEdge{{name: "summary", level: CaptureRedacted}}},
	"run.started":                 {members: []gateEdge{{name: "prompt", level: CaptureRedacted}}},
	"run.step.finished":           {},
	"run.step.started":            {members: []gateEdge{{name: "name", level: CaptureRedacted}}},
	"session.compacted":           {},
	"session.ended":               {},
	"session.started":             {members: []gateEdge{{name: "label", level: CaptureRedacted}, {name: "cwd", level: CaptureRedacted}}},
	"state.delta":                 {members: []gateEdge{{name: "delta", level: CaptureRedacted}}},
	"state.snapshot":              {members: []gateEdge{{name: "state", level: CaptureRedacted}}},
	"tool.completed":              {members: []gateEdge{{name: "result_redacted", level: CaptureRedacted}, {name: "result", level: CaptureFull}}},
	"tool.denied":                 {},
	"tool.failed":                 {members: errorEdges},
	"tool.requested":              {members: []gateEdge{{name: "args_redacted", level: CaptureRedacted}, {name: "args", level: CaptureFull}}},
}

// msgNode is an object whose one member name is redacted.
func msgNode(name string) *gateNode {
	return &gateNode{members: []gateEdge{{name: name, level: CaptureRedacted}}}
}

// errorEdges: error_info {type [metadata], message [redacted]} (AEP-0002 §5.2).
var errorEdges = []gateEdge{{name: "error", level: CaptureMetadata, node: msgNode("message")}}

// answerEdges: answer {option [metadata], text [redacted], values [metadata*]}.
var answerEdges = []gateEdge{{name: "answer", level: CaptureMetadata, node: &gateNode{members: []gateEdge{
	{name: "text", level: CaptureRedacted},
	{name: "values", level: CaptureMetadata, degrade: dgValues},
}}}}

// documentsNode: [document], document {content_redacted [redacted], content [full]}.
var documentsNode = &gateNode{items: &gateNode{members: []gateEdge{
	{name: "content_redacted", level: CaptureRedacted},
	{name: "content", level: CaptureFull},
}}}

// pruner writes a data object pruned to target. It walks bytes the scanner
// has already validated, so it trusts their syntax.
type pruner struct {
	b       []byte
	out     []byte
	target  Capture
	agent   []byte // envelope agent and subject, for the synthesized
	subject []byte // prompt; nil when absent
	data    int    // offset of the data object
	scratch []byte // decoded member names with escapes
}

// objMember is one member of a nested object: its raw name (with quotes),
// decoded name and value span.
type objMember struct {
	rawName      []byte
	name         []byte
	vStart, vEnd int
}

// members calls fn for each member of the object at b[i] == '{'. name is
// only valid during the call.
func (w *pruner) members(i int, fn func(m objMember)) {
	it := jsonscan.Object(w.b, i)
	for jm, ok := it.Next(); ok; jm, ok = it.Next() {
		m := objMember{rawName: w.b[jm.Name:jm.NameEnd], name: jm.RawName(w.b), vStart: jm.Value, vEnd: jm.End}
		if bytes.IndexByte(m.name, '\\') >= 0 {
			w.scratch = jsonscan.AppendUnescaped(w.scratch[:0], m.name)
			m.name = w.scratch
		}
		fn(m)
	}
}

// elements calls fn for each element span of the array at b[i] == '['.
func (w *pruner) elements(i int, fn func(start, end int)) {
	it := jsonscan.Array(w.b, i)
	for s, e, ok := it.Next(); ok; s, e, ok = it.Next() {
		fn(s, e)
	}
}

// comma writes the separator before a kept member or element.
func (w *pruner) comma(first *bool) {
	if !*first {
		w.out = append(w.out, ',')
	}
	*first = false
}

func (w *pruner) name(first *bool, m *objMember) {
	w.comma(first)
	w.out = append(w.out, m.rawName...)
	w.out = append(w.out, ':')
}

// object writes the object at b[i] pruned by n.
func (w *pruner) object(i int, n *gateNode) {
	w.out = append(w.out, '{')
	first := true
	w.members(i, func(m objMember) {
		e := n.edge(m.name)
		switch {
		case e == nil:
			w.name(&first, &m)
			w.out = append(w.out, w.b[m.vStart:m.vEnd]...)
		case e.level > w.target:
			// above the level: removed
		case e.degrade != dgNone && w.target < CaptureRedacted:
			w.degrade(&first, &m, e.degrade)
		case e.node.gated():
			c := w.b[m.vStart]
			if (len(e.node.members) > 0 && c != '{') || (e.node.items != nil && c != '[') {
				return // shape contradicts the schema: removed
			}
			w.name(&first, &m)
			w.value(m.vStart, e.node)
		default:
			w.name(&first, &m)
			w.out = append(w.out, w.b[m.vStart:m.vEnd]...)
		}
	})
	w.out = append(w.out, '}')
}

// value writes the object or array at b[i] pruned by n; the caller checked
// the shape.
func (w *pruner) value(i int, n *gateNode) {
	if w.b[i] == '{' {
		w.object(i, n)
		return
	}
	w.out = append(w.out, '[')
	first := true
	it := n.items
	w.elements(i, func(s, e int) {
		c := w.b[s]
		switch {
		case !it.gated():
			w.comma(&first)
			w.out = append(w.out, w.b[s:e]...)
		case (len(it.members) > 0 && c == '{') || (it.items != nil && c == '['):
			w.comma(&first)
			w.value(s, it)
		}
		// else: an element whose shape contradicts the schema is removed
	})
	w.out = append(w.out, ']')
}

// degrade writes a [metadata*] member in its structural form, or nothing
// when its shape leaves no structural form.
func (w *pruner) degrade(first *bool, m *objMember, d degrade) {
	c := w.b[m.vStart]
	switch d {
	case dgPrompt:
		w.name(first, m)
		w.out = appendJSONStr(w.out, w.synthPrompt())
	case dgOptions, dgFields:
		if c != '[' {
			return
		}
		w.name(first, m)
		w.relabelArray(m.vStart, d == dgFields)
	case dgValues:
		if c != '{' {
			return
		}
		w.name(first, m)
		w.out = append(w.out, '{')
		vf := true
		w.members(m.vStart, func(v objMember) {
			switch w.b[v.vStart] {
			case 't', 'f', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
				w.name(&vf, &v)
				w.out = append(w.out, w.b[v.vStart:v.vEnd]...)
			}
		})
		w.out = append(w.out, '}')
	}
}

// synthPrompt is the AEP-0003 §9.2 metadata prompt, "{agent} requests
// {kind}: {subject}", built from envelope attributes and data.kind only.
func (w *pruner) synthPrompt() []byte {
	s := make([]byte, 0, 64)
	s = append(append(s, w.agent...), " requests "...)
	var kind []byte // data.kind when it is a string, with its quotes
	w.members(w.data, func(m objMember) {
		if string(m.name) == "kind" { // the last one, as JSON decoders do
			kind = nil
			if w.b[m.vStart] == '"' {
				kind = w.b[m.vStart:m.vEnd]
			}
		}
	})
	if kind == nil {
		s = append(s, "attention"...)
	} else {
		s = jsonscan.AppendUnescaped(s, kind[1:len(kind)-1])
	}
	if w.subject != nil {
		s = append(append(s, ": "...), w.subject...)
	}
	return s
}

// relabelArray writes an array of {id, label} objects (options, choices) or
// of field_specs with every label replaced by the element's id. Elements
// that are not objects are removed.
func (w *pruner) relabelArray(i int, fieldSpecs bool) {
	w.out = append(w.out, '[')
	first := true
	w.elements(i, func(s, _ int) {
		if w.b[s] != '{' {
			return
		}
		w.comma(&first)
		w.relabelObject(s, fieldSpecs)
	})
	w.out = append(w.out, ']')
}

func (w *pruner) relabelObject(i int, fieldSpec bool) {
	var id []byte // the label to write, as a JSON string, or nil
	w.members(i, func(m objMember) {
		if string(m.name) != "id" {
			return
		}
		switch v := w.b[m.vStart:m.vEnd]; v[0] {
		case '"':
			id = v
		case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			id = append(append([]byte{'"'}, v...), '"')
		default:
			id = nil
		}
	})
	w.out = append(w.out, '{')
	first, labelled := true, false
	w.members(i, func(m objMember) {
		switch {
		case string(m.name) == "label":
			if id != nil {
				w.name(&first, &m)
				w.out = append(w.out, id...)
				labelled = true
			}
		case fieldSpec && string(m.name) == "choices":
			if w.b[m.vStart] == '[' {
				w.name(&first, &m)
				w.relabelArray(m.vStart, false)
			}
		default:
			w.name(&first, &m)
			w.out = append(w.out, w.b[m.vStart:m.vEnd]...)
		}
	})
	if id != nil && !labelled {
		w.comma(&first)
		w.out = append(w.out, `"label":`...)
		w.out = append(w.out, id...)
	}
	w.out = append(w.out, '}')
}
