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

// cePassThrough are CloudEvents' own attributes that the envelope shares
// (rule B2), in output order; type is mapped by B3.
var cePassThrough = []string{"id", "source", "type", "subject", "time"}

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
// CloudEvent, JSON format, structured mode (AEP-0005 §1).
func ToCloudEvent(raw []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("aep: cloudevent: %w", err)
	}
	var typ string
	if err := json.Unmarshal(m["type"], &typ); err != nil || typ == "" {
		return nil, errors.New("aep: cloudevent: the event has no type")
	}
	w := newMemberWriter()
	w.put("specversion", json.RawMessage(`"1.0"`)) // B1
	for _, k := range cePassThrough {
		if v, ok := m[k]; ok {
			if k == "type" {
				v, _ = json.Marshal(CETypeRoot + typ) // B3
			}
			w.put(k, v)
		}
	}
	if _, ok := m["data"]; ok {
		w.put("datacontenttype", json.RawMessage(`"application/json"`)) // B1
	}
	for _, a := range ceAttr { // B4, B5
		if v, ok := m[a.aep]; ok {
			w.put(a.ce, v)
		}
	}
	for _, k := range sortedExtensions(m, rCoreAttrs) { // extensions pass through (B4)
		w.put(k, m[k])
	}
	if v, ok := m["data"]; ok {
		w.put("data", v)
	}
	return w.bytes(), nil
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
