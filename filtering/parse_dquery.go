package filtering

import (
	"net/url"
	"strings"
)

// ParseDQuery compiles the query-parameter form of a dialect D filter (the
// SSE binding, GET /aep/events?types=a,b&types=c&session_id=...) with
// DefaultLimits.
func ParseDQuery(q url.Values) (*Filter, error) { return DefaultLimits.ParseDQuery(q) }

// ParseDQuery compiles the query-parameter form of a dialect D filter under
// the limits l. The filter members (types, source, target, topic,
// session_id, conversation_id, task_id) may be repeated and each occurrence
// may hold comma-separated values; from_cursor and delivery_mode are single
// values. Other parameters (access_token, ...) belong to the caller and are
// ignored. As in the JSON form, a filter must name at least one of types,
// source, target or topic: a session_id, conversation_id or task_id scope
// alone is refused (seed 000), with a message suggesting types=*.
func (l Limits) ParseDQuery(q url.Values) (*Filter, error) {
	l = l.withDefaults()
	b := dBuilder{lim: l}
	size := 0
	for k, vs := range q {
		for _, v := range vs {
			size += len(k) + len(v) + 2
		}
	}
	if size > l.MaxBytes {
		return nil, errD("", "limit: filter is larger than %d bytes", l.MaxBytes)
	}
	for _, key := range [...]string{"types", "source", "target", "topic", "session_id", "conversation_id", "task_id"} {
		vs, ok := q[key]
		if !ok {
			continue
		}
		var strs []string
		for _, v := range vs {
			strs = append(strs, strings.Split(v, ",")...)
		}
		if err := b.add(key, strs); err != nil {
			return nil, err
		}
	}
	if vs, ok := q["from_cursor"]; ok {
		if len(vs) != 1 {
			return nil, errD("from_cursor", "from_cursor must be given once")
		}
		if err := b.setCursor(vs[0]); err != nil {
			return nil, err
		}
	}
	if vs, ok := q["delivery_mode"]; ok {
		if len(vs) != 1 {
			return nil, errD("delivery_mode", "delivery_mode must be given once")
		}
		if err := b.setMode(vs[0]); err != nil {
			return nil, err
		}
	}
	return b.finish()
}
