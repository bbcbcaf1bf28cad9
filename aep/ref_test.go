package aep

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
)

// refMember is one top-level member as encoding/json sees it.
type refMember struct {
	name string
	raw  json.RawMessage
}

// refMembers decodes raw's top-level object with encoding/json, keeping
// document order, and reports duplicate names.
func refMembers(raw []byte) ([]refMember, bool, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, false, err
	}
	if tok != json.Delim('{') {
		return nil, false, fmt.Errorf("not an object")
	}
	var ms []refMember
	seen := map[string]bool{}
	dup := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false, err
		}
		name := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false, err
		}
		dup = dup || seen[name]
		seen[name] = true
		ms = append(ms, refMember{name, v})
	}
	return ms, dup, nil
}

// refAttrs is the slow reference extraction: what Parse must return for an
// event it accepts, computed with encoding/json.
func refAttrs(raw []byte) (Attrs, error) {
	ms, _, err := refMembers(raw)
	if err != nil {
		return Attrs{}, err
	}
	var a Attrs
	str := func(v json.RawMessage) string {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			panic(err)
		}
		return s
	}
	num := func(v json.RawMessage) int64 {
		var n int64
		if err := json.Unmarshal(v, &n); err != nil {
			panic(err)
		}
		return n
	}
	for _, m := range ms {
		if m.name == "aep" {
			a.Dialect = DialectR
		}
		if m.name == "aep_version" {
			a.Dialect = DialectD
		}
	}
	for _, m := range ms {
		switch a.Dialect {
		case DialectR:
			switch m.name {
			case "id":
				a.ID = str(m.raw)
			case "type":
				a.Type = str(m.raw)
			case "source":
				a.Source = str(m.raw)
			case "session":
				a.Session = str(m.raw)
			case "agent":
				a.Agent = str(m.raw)
			case "subject":
				a.Subject = str(m.raw)
			case "run":
				a.Run = str(m.raw)
			case "step":
				a.Step = str(m.raw)
			case "cause":
				a.Cause = str(m.raw)
			case "severity":
				a.Severity = str(m.raw)
			case "capture":
				a.Capture = str(m.raw)
			case "seq":
				a.Seq, a.HasSeq = num(m.raw), true
			case "epoch":
				a.Epoch, a.HasEpoch = num(m.raw), true
			case "aep", "time", "traceparent", "data":
			default:
				a.Ext = append(a.Ext, Ext{Name: m.name, Value: refExtValue(m.raw)})
			}
		case DialectD:
			switch m.name {
			case "id":
				a.ID = str(m.raw)
			case "type":
				a.Type = str(m.raw)
			case "source":
				a.Source = str(m.raw)
			case "session_id":
				a.Session = str(m.raw)
			case "conversation_id":
				a.Conversation = str(m.raw)
			case "task_id":
				a.Task = str(m.raw)
			case "target":
				a.Target = str(m.raw)
			case "topic":
				a.Topic = str(m.raw)
			case "correlation_id":
				a.Correlation = str(m.raw)
			case "causation_id":
				a.Causation = str(m.raw)
			case "delivery":
				var d struct {
					Mode *string `json:"mode"`
				}
				if json.Unmarshal(m.raw, &d) == nil && d.Mode != nil {
					a.DeliveryMode = *d.Mode
				}
			case "tenant_id":
				a.Claims |= ClaimTenantID
			case "authorization":
				a.Claims |= ClaimAuthorization
			}
		}
	}
	return a, nil
}

// refExtValue is the canonical form of a scalar extension value.
func refExtValue(raw json.RawMessage) []byte {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		panic(err)
	}
	switch v := v.(type) {
	case string:
		return AppendJSONString(nil, v)
	case json.Number:
		if v == "-0" {
			return []byte("0")
		}
		return []byte(v)
	case bool:
		return []byte(fmt.Sprint(v))
	}
	panic(fmt.Sprintf("non-scalar extension value %s", raw))
}

// attrsEqual compares two Attrs, treating a nil and an empty Ext alike.
func attrsEqual(a, b Attrs) bool {
	if len(a.Ext) == 0 && len(b.Ext) == 0 {
		a.Ext, b.Ext = nil, nil
	}
	return reflect.DeepEqual(a, b)
}
