package aep

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
)

// CloudEvents mapping of dialect R events (AEP-0005 §1-2): an event is a
// CloudEvents 1.0 event in the JSON format, structured mode, by five
// mechanical rules, and back. The mapping works on the members' raw
// bytes: values pass through verbatim, so the inverse of the forward
// mapping is the original event modulo member order (the round-trip
// identity AEP-0005 §5 requires; aep/testdata/r-ce-*.json*).

// CETypeRoot prefixes every AEP type as a CloudEvents type (rule B3).
const CETypeRoot = "dev.aep."

// ceAttr maps the envelope attributes that are not CloudEvents' own to
// their CloudEvents extension names (rule B4, and B5 for traceparent), in
// the order the forward mapping writes them.
var ceAttr = []struct{ aep, ce string }{
	{"aep", "aepversion"}, {"agent", "aepagentid"}, {"session", "aepsessionid"}, {"run", "aeprunid"},
	{"step", "aepstep"}, {"seq", "aepsequence"}, {"epoch", "aepepoch"}, {"cause", "aepcausationid"},
	{"severity", "aepseverity"}, {"capture", "aepcapture"}, {"traceparent", "traceparent"},
}

// ceExtName is AEP-0001 §5.4's extension attribute grammar, which is
// CloudEvents' attribute name grammar too.
var ceExtName = regexp.MustCompile(`^[a-z0-9]{1,20}$`)

// Errors of the CloudEvents mapping.
var (
	// ErrForeignCloudEvent: a CloudEvent whose type is not under
	// CETypeRoot is out of the mapping's scope (AEP-0005 §2 rule 3).
	ErrForeignCloudEvent = errors.New("aep: not an AEP CloudEvent: its type is not under the dev.aep root")
	// ErrNotCloudEvent: not a CloudEvents 1.0 JSON event this mapping
	// takes.
	ErrNotCloudEvent = errors.New("aep: not a CloudEvents 1.0 structured JSON event")
)

// ToCloudEvent maps a dialect R event (valid: Parse accepted it) to its
// CloudEvent, JSON format, structured mode (AEP-0005 §1). It scans the
// event once with the package's scanner and copies each value's bytes: no
// decoding of values, one allocation for the output.
func ToCloudEvent(raw []byte) ([]byte, error) {
	var p parser
	p.init(raw, Limits{})
	if f := p.scanTop(); f != nil {
		return nil, f.toError(DialectR)
	}
	// slots: the members the mapping names, by their place in ceOrder
	var slot [ceDataSlot + 1]*member
	var ext [24]int // extension members in document order (most events have none or a few)
	exts := ext[:0]
	for i := 0; i < p.n; i++ {
		m := p.mem(i)
		k := ceSlot(m.name)
		switch {
		case k >= 0:
			slot[k] = m
		case len(exts) < cap(ext):
			exts = append(exts, i)
		default:
			return nil, errors.New("aep: cloudevent: more than 24 extension attributes")
		}
	}
	typ := slot[ceTypeSlot]
	if typ == nil || typ.kind != vString || typ.end-typ.start < 3 {
		return nil, errors.New("aep: cloudevent: the event has no type")
	}
	out := make([]byte, 0, len(raw)+160)
	out = append(out, `{"specversion":"1.0"`...)
	for k, name := range ceOrder {
		m := slot[k]
		if m == nil || k == ceDataSlot { // data goes last
			continue
		}
		out = append(out, ',', '"')
		out = append(out, name...)
		out = append(out, '"', ':')
		if k == ceTypeSlot {
			out = appendCEType(out, m, raw)
		} else {
			out = append(out, m.raw(raw)...)
		}
		if k == ceTimeSlot && slot[ceDataSlot] != nil {
			out = append(out, `,"datacontenttype":"application/json"`...) // B1
		}
	}
	if slot[ceTimeSlot] == nil && slot[ceDataSlot] != nil {
		out = append(out, `,"datacontenttype":"application/json"`...)
	}
	for _, i := range exts { // extensions pass through (B4): their names are CloudEvents names
		m := p.mem(i)
		out = append(out, ',')
		name, _ := json.Marshal(string(m.name))
		out = append(out, name...)
		out = append(out, ':')
		out = append(out, m.raw(raw)...)
	}
	if d := slot[ceDataSlot]; d != nil {
		out = append(out, `,"data":`...)
		out = append(out, d.raw(raw)...)
	}
	return append(out, '}'), nil
}

// ceOrder is the forward mapping's output order of the members it names,
// as CloudEvents names: B2's pass-through attributes, the B4/B5 table, and
// data (written last).
var ceOrder = func() []string {
	out := []string{"id", "source", "type", "subject", "time"} // B2's pass-through attributes (type by B3)
	for _, a := range ceAttr {
		out = append(out, a.ce)
	}
	out = append(out, "data")
	if len(out) != ceDataSlot+1 {
		panic("aep: ceOrder and ceDataSlot disagree")
	}
	return out
}()

// Slots of ceOrder the forward mapping treats apart.
const (
	ceTypeSlot = 2
	ceTimeSlot = 4
	ceDataSlot = 16 // len(ceOrder)-1: 5 pass-through + 11 mapped
)

// ceSlot is the ceOrder slot of the envelope member named name, -1 for an
// extension.
func ceSlot(name []byte) int {
	switch string(name) {
	case "id":
		return 0
	case "source":
		return 1
	case "type":
		return ceTypeSlot
	case "subject":
		return 3
	case "time":
		return ceTimeSlot
	case "data":
		return ceDataSlot
	}
	for i, a := range ceAttr {
		if string(name) == a.aep {
			return 5 + i
		}
	}
	return -1
}

// appendCEType appends the type member m as its CloudEvents type (B3).
func appendCEType(out []byte, m *member, raw []byte) []byte {
	if !m.esc {
		out = append(out, `"`+CETypeRoot...)
		out = append(out, m.strBody(raw)...)
		return append(out, '"')
	}
	var t string
	_ = json.Unmarshal(m.raw(raw), &t) // scanned as a valid string
	b, _ := json.Marshal(CETypeRoot + t)
	return append(out, b...)
}

// FromCloudEvent maps an AEP CloudEvent back to its dialect R event
// (AEP-0005 §2): constants dropped, the type root stripped, extension
// names reversed; other extension attributes are kept when their names
// are legal AEP extension names, else dropped and named in dropped. The
// caller validates the result (Parse) as any event.
func FromCloudEvent(ce []byte) (raw []byte, dropped []string, err error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(ce, &m); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrNotCloudEvent, err)
	}
	var spec, typ, dct string
	if json.Unmarshal(m["specversion"], &spec) != nil || spec != "1.0" {
		return nil, nil, fmt.Errorf("%w: specversion must be \"1.0\"", ErrNotCloudEvent)
	}
	if json.Unmarshal(m["type"], &typ) != nil || typ == "" {
		return nil, nil, fmt.Errorf("%w: no type", ErrNotCloudEvent)
	}
	if len(typ) <= len(CETypeRoot) || typ[:len(CETypeRoot)] != CETypeRoot {
		return nil, nil, fmt.Errorf("%w (type %s)", ErrForeignCloudEvent, QuoteTrunc(typ))
	}
	if v, ok := m["datacontenttype"]; ok && (json.Unmarshal(v, &dct) != nil || dct != "application/json") {
		return nil, nil, fmt.Errorf("%w: datacontenttype must be application/json", ErrNotCloudEvent)
	}
	if _, ok := m["data_base64"]; ok {
		return nil, nil, fmt.Errorf("%w: data_base64 is not an AEP payload (data must be JSON)", ErrNotCloudEvent)
	}
	w := newMemberWriter()
	if v, ok := m["aepversion"]; ok {
		w.put("aep", v)
	}
	for _, k := range []string{"id", "type", "subject", "time", "source"} {
		if v, ok := m[k]; ok {
			if k == "type" {
				v, _ = json.Marshal(typ[len(CETypeRoot):])
			}
			w.put(k, v)
		}
	}
	for _, a := range ceAttr[1:] {
		if v, ok := m[a.ce]; ok {
			w.put(a.aep, v)
		}
	}
	for _, k := range sortedExtensions(m, ceCoreAttrs) {
		if !ceExtName.MatchString(k) || rCoreAttrs[k] {
			dropped = append(dropped, k)
			continue
		}
		w.put(k, m[k])
	}
	if v, ok := m["data"]; ok {
		w.put("data", v)
	}
	return w.bytes(), dropped, nil
}

// rCoreAttrs are the envelope's own members: never extensions.
var rCoreAttrs = func() map[string]bool {
	m := map[string]bool{"id": true, "type": true, "time": true, "source": true, "subject": true, "data": true}
	for _, a := range ceAttr {
		m[a.aep] = true
	}
	return m
}()

// ceCoreAttrs are the CloudEvent members the inverse maps or drops by
// rule.
var ceCoreAttrs = func() map[string]bool {
	m := map[string]bool{"specversion": true, "datacontenttype": true, "id": true, "type": true, "time": true,
		"source": true, "subject": true, "data": true}
	for _, a := range ceAttr {
		m[a.ce] = true
	}
	return m
}()

func sortedExtensions(m map[string]json.RawMessage, core map[string]bool) []string {
	var out []string
	for k := range m {
		if !core[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// memberWriter writes a JSON object member by member, in call order.
type memberWriter struct{ b bytes.Buffer }

func newMemberWriter() *memberWriter {
	w := &memberWriter{}
	w.b.WriteByte('{')
	return w
}

func (w *memberWriter) put(k string, v json.RawMessage) {
	if w.b.Len() > 1 {
		w.b.WriteByte(',')
	}
	name, _ := json.Marshal(k)
	w.b.Write(name)
	w.b.WriteByte(':')
	w.b.Write(v)
}

func (w *memberWriter) bytes() []byte {
	w.b.WriteByte('}')
	return w.b.Bytes()
}
