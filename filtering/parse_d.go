package filtering

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/aep-gateway/aep-gateway/aep"
)

// dKeys are the dialect D filter members matched on exact values, in the
// order the normalized form lists them (seed 000, subscription-filter schema).
var dKeys = [...]struct {
	name string
	f    field
}{
	{"source", fSource},
	{"target", fTarget},
	{"topic", fTopic},
	{"session_id", fSession},
	{"conversation_id", fConversation},
	{"task_id", fTask},
}

// deliveryModes is the delivery_mode enum of seed 000.
var deliveryModes = [...]string{"best_effort", "at_least_once", "replayable"}

// ParseD compiles a dialect D filter object (seed 000; the payload of
// subscription.requested) with DefaultLimits.
func ParseD(data []byte) (*Filter, error) { return DefaultLimits.ParseD(data) }

// ParseD compiles a dialect D filter object under the limits l. A refused
// filter yields an *Error with code subscription_rejected.
func (l Limits) ParseD(data []byte) (*Filter, error) {
	l = l.withDefaults()
	v, msg := parseJSON(data, l)
	if msg != "" {
		return nil, errD("", "%s", msg)
	}
	if v.kind != jObject {
		return nil, errD("", "filter must be a JSON object, not %s", v.kind)
	}
	b := dBuilder{lim: l}
	for _, m := range v.obj {
		if err := b.member(m.key, m.val); err != nil {
			return nil, err
		}
	}
	return b.finish()
}

// dBuilder collects a dialect D filter from either of its forms.
type dBuilder struct {
	lim          Limits
	types        []string
	hasTypes     bool
	vals         [numFields][]string
	has          [numFields]bool
	total        int
	fromCursor   string
	deliveryMode string
	ignored      []string
}

func (b *dBuilder) member(key string, v jval) error {
	switch key {
	case "from_cursor":
		if v.kind != jString {
			return errD(key, "from_cursor must be a string, not %s", v.kind)
		}
		return b.setCursor(v.s)
	case "delivery_mode":
		if v.kind != jString {
			return errD(key, "delivery_mode must be a string, not %s", v.kind)
		}
		return b.setMode(v.s)
	}
	if !isDKey(key) {
		b.ignored = append(b.ignored, key)
		return nil
	}
	var strs []string
	switch v.kind {
	case jString:
		strs = []string{v.s}
	case jArray:
		strs = make([]string, 0, len(v.arr))
		for _, e := range v.arr {
			if e.kind != jString {
				return errD(key, "%s must hold only strings, found %s", key, e.kind)
			}
			strs = append(strs, e.s)
		}
	default:
		return errD(key, "%s must be a string or an array of strings, not %s", key, v.kind)
	}
	return b.add(key, strs)
}

func isDKey(key string) bool {
	if key == "types" {
		return true
	}
	for _, k := range dKeys {
		if k.name == key {
			return true
		}
	}
	return false
}

// add appends the values of one member (already split in the query form).
func (b *dBuilder) add(key string, strs []string) error {
	if len(strs) == 0 {
		return errD(key, "%s must not be an empty array", key)
	}
	var dst *[]string
	if key == "types" {
		dst, b.hasTypes = &b.types, true
	} else {
		for _, k := range dKeys {
			if k.name == key {
				dst, b.has[k.f] = &b.vals[k.f], true
			}
		}
	}
	for _, s := range strs {
		if msg := checkValue(s, b.lim); msg != "" {
			return errD(key, "%s: %s", key, msg)
		}
		if contains(*dst, s) {
			continue
		}
		if len(*dst) >= b.lim.MaxValues {
			return errD(key, "limit: %s has more than %d values", key, b.lim.MaxValues)
		}
		if b.total >= b.lim.MaxTotalValues {
			return errD(key, "limit: filter has more than %d values", b.lim.MaxTotalValues)
		}
		*dst = append(*dst, s)
		b.total++
	}
	return nil
}

func (b *dBuilder) setCursor(s string) error {
	if s == "" {
		return errD("from_cursor", "from_cursor must not be empty (omit it to start live)")
	}
	if len(s) > b.lim.MaxValueLen {
		return errD("from_cursor", "limit: from_cursor is longer than %d bytes", b.lim.MaxValueLen)
	}
	if !utf8.ValidString(s) {
		return errD("from_cursor", "from_cursor is not valid UTF-8")
	}
	b.fromCursor = s
	return nil
}

func (b *dBuilder) setMode(s string) error {
	for _, m := range deliveryModes {
		if m == s {
			b.deliveryMode = s
			return nil
		}
	}
	return errD("delivery_mode", "delivery_mode %s is not one of best_effort, at_least_once, replayable", quote(s))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// finish checks seed 000's requirements ("Implementation must require at
// least one of types, source, target, or topic") and compiles. A scope
// (session_id, conversation_id, task_id) alone is not enough, in either form.
func (b *dBuilder) finish() (*Filter, error) {
	criteria := b.hasTypes || b.has[fSource] || b.has[fTarget] || b.has[fTopic]
	scoped := b.has[fSession] || b.has[fConversation] || b.has[fTask]
	switch {
	case !criteria && !scoped:
		return nil, errD("", "subscription must include at least one filter criterion; types=* receives every event")
	case !criteria:
		return nil, errD("", "subscription filter must include at least one of types, source, target or topic; add types=* to receive every type within the session_id, conversation_id or task_id scope")
	}
	f := &Filter{
		dialect:      aep.DialectD,
		fromCursor:   b.fromCursor,
		deliveryMode: b.deliveryMode,
		ignored:      b.ignored,
	}
	if b.hasTypes {
		f.hasTypes = true
		for _, s := range b.types {
			p, msg := compileDPattern(s, b.lim)
			if msg != "" {
				return nil, errD("types", "types: %s", msg)
			}
			if p.kind == patAll {
				f.typeAll = true
			}
			f.types = append(f.types, p)
		}
		if f.typeAll {
			// "*" subsumes every other pattern.
			f.types = []typePattern{{raw: "*", kind: patAll}}
			b.types = []string{"*"}
		}
	}
	for fld := field(0); fld < numFields; fld++ {
		if b.has[fld] {
			f.strs = append(f.strs, strPred{f: fld, set: newStrSet(b.vals[fld])})
		}
	}
	f.src = b.normalized()
	return f, nil
}

// normalized renders the accepted filter in its canonical JSON form.
func (b *dBuilder) normalized() []byte {
	var o objWriter
	if b.hasTypes {
		o.strings("types", b.types)
	}
	for _, k := range dKeys {
		if b.has[k.f] {
			o.strings(k.name, b.vals[k.f])
		}
	}
	if b.fromCursor != "" {
		o.raw("from_cursor", jsonString(b.fromCursor))
	}
	if b.deliveryMode != "" {
		o.raw("delivery_mode", jsonString(b.deliveryMode))
	}
	return o.close()
}

// objWriter builds a JSON object member by member.
type objWriter struct{ buf []byte }

func (o *objWriter) raw(key string, val []byte) {
	if len(o.buf) == 0 {
		o.buf = append(o.buf, '{')
	} else {
		o.buf = append(o.buf, ',')
	}
	o.buf = append(o.buf, jsonString(key)...)
	o.buf = append(o.buf, ':')
	o.buf = append(o.buf, val...)
}

func (o *objWriter) strings(key string, vals []string) {
	arr := []byte{'['}
	for i, v := range vals {
		if i > 0 {
			arr = append(arr, ',')
		}
		arr = append(arr, jsonString(v)...)
	}
	o.raw(key, append(arr, ']'))
}

func (o *objWriter) close() []byte {
	if len(o.buf) == 0 {
		return []byte("{}")
	}
	return append(o.buf, '}')
}

func jsonString(s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}
