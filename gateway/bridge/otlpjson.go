package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/aep-gateway/aep-gateway/aep"
)

// The OTLP/HTTP JSON encoding (OTLP specification, "JSON Protobuf
// Encoding"): the protobuf messages in proto3's JSON mapping with lowerCamel
// field names, 64-bit integers as decimal strings, and trace and span ids
// as hex, not base64. aep.OTLPLogRecord is AEP-0005's data-model form (the
// pins'); this is its wire form, one LogRecord at a time, grouped under
// their resources by logsRequest.

// ScopeName is the instrumentation scope of every exported LogRecord.
const ScopeName = "dev.aep.gateway"

// appendAnyValue appends the OTLP AnyValue of a JSON value. Scalars (the
// attributes: every envelope member) are copied from their JSON text without
// decoding: a JSON string is already a valid OTLP JSON string, a JSON
// number without fraction or exponent an int64's digits. Objects and arrays
// (payload members) are decoded.
func appendAnyValue(dst []byte, raw json.RawMessage) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return dst, errors.New("otlp: empty value")
	}
	switch c := raw[0]; {
	case c == '"':
		if !json.Valid(raw) {
			return dst, errors.New("otlp: value: not a JSON string")
		}
		dst = append(dst, `{"stringValue":`...)
		return append(append(dst, raw...), '}'), nil
	case c == 't' || c == 'f':
		if string(raw) != "true" && string(raw) != "false" {
			return dst, errors.New("otlp: value: not JSON")
		}
		return append(append(append(dst, `{"boolValue":`...), raw...), '}'), nil
	case c == 'n':
		if string(raw) != "null" {
			return dst, errors.New("otlp: value: not JSON")
		}
		return append(dst, "{}"...), nil
	case c == '-' || (c >= '0' && c <= '9'):
		if _, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			return append(append(append(dst, `{"intValue":"`...), raw...), `"}`...), nil
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return dst, fmt.Errorf("otlp: value: %w", err)
	}
	return appendAny(dst, v), nil
}

func appendAny(dst []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(dst, "{}"...)
	case bool:
		return append(append(dst, `{"boolValue":`...), strconv.FormatBool(x)+"}"...)
	case string:
		dst = append(dst, `{"stringValue":`...)
		b, _ := json.Marshal(x)
		return append(append(dst, b...), '}')
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return append(append(dst, `{"intValue":"`...), strconv.FormatInt(i, 10)+`"}`...)
		}
		f, err := x.Float64()
		if err != nil { // beyond float64: keep the digits
			b, _ := json.Marshal(x.String())
			return append(append(append(dst, `{"stringValue":`...), b...), '}')
		}
		return append(append(dst, `{"doubleValue":`...), strconv.FormatFloat(f, 'g', -1, 64)+"}"...)
	case []any:
		dst = append(dst, `{"arrayValue":{"values":[`...)
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendAny(dst, e)
		}
		return append(dst, "]}}"...)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		dst = append(dst, `{"kvlistValue":{"values":[`...)
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendKV(dst, k, x[k])
		}
		return append(dst, "]}}"...)
	}
	return append(dst, "{}"...)
}

func appendKV(dst []byte, k string, v any) []byte {
	dst = appendJSONString(append(dst, `{"key":`...), k)
	dst = append(dst, `,"value":`...)
	return append(appendAny(dst, v), '}')
}

// appendJSONString appends s as a JSON string: as is when it needs no
// escaping (attribute keys, event names), else through encoding/json.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			b, _ := json.Marshal(s)
			return append(dst, b...)
		}
	}
	return append(append(append(dst, '"'), s...), '"')
}

// appendAttributes appends a KeyValue list, keys sorted.
func appendAttributes(dst []byte, attrs map[string]json.RawMessage) ([]byte, error) {
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	dst = append(dst, '[')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(append(dst, `{"key":`...), k)
		dst = append(dst, `,"value":`...)
		var err error
		if dst, err = appendAnyValue(dst, attrs[k]); err != nil {
			return dst, fmt.Errorf("attribute %s: %w", k, err)
		}
		dst = append(dst, '}')
	}
	return append(dst, ']'), nil
}

// appendLogRecord appends r as an OTLP LogRecord.
func appendLogRecord(dst []byte, r *aep.OTLPLogRecord) ([]byte, error) {
	dst = append(dst, `{"timeUnixNano":"`...)
	dst = strconv.AppendInt(dst, r.TimeUnixNano, 10)
	dst = append(dst, `","eventName":`...)
	dst = appendJSONString(dst, r.EventName)
	dst = append(dst, `,"severityText":"`...)
	dst = append(dst, r.SeverityText...)
	dst = append(dst, `","severityNumber":`...)
	dst = strconv.AppendInt(dst, int64(r.SeverityNumber), 10)
	if r.TraceID != "" {
		dst = append(append(append(dst, `,"traceId":"`...), r.TraceID...), '"')
	}
	if r.SpanID != "" {
		dst = append(append(append(dst, `,"spanId":"`...), r.SpanID...), '"')
	}
	if r.Flags != nil {
		dst = strconv.AppendInt(append(dst, `,"flags":`...), int64(*r.Flags), 10)
	}
	var err error
	dst = append(dst, `,"attributes":`...)
	if dst, err = appendAttributes(dst, r.Attributes); err != nil {
		return dst, err
	}
	if r.Body != nil {
		dst = append(dst, `,"body":{"kvlistValue":{"values":`...)
		if dst, err = appendAttributes(dst, r.Body); err != nil {
			return dst, fmt.Errorf("body: %w", err)
		}
		dst = append(dst, "}}"...)
	}
	return append(dst, '}'), nil
}

// exportItem is one encoded LogRecord and its resource.
type exportItem struct {
	resource string // the encoded resource attributes: the grouping key
	record   []byte
}

// logsRequest is an ExportLogsServiceRequest of items, one ResourceLogs
// per distinct resource in first-seen order.
func logsRequest(items []exportItem) []byte {
	var order []string
	groups := map[string][][]byte{}
	size := 64
	for _, it := range items {
		if _, ok := groups[it.resource]; !ok {
			order = append(order, it.resource)
		}
		groups[it.resource] = append(groups[it.resource], it.record)
		size += len(it.record) + 1
	}
	out := make([]byte, 0, size+len(order)*(128))
	out = append(out, `{"resourceLogs":[`...)
	for i, res := range order {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"resource":{"attributes":`...)
		out = append(out, res...)
		out = append(out, `},"scopeLogs":[{"scope":{"name":"`+ScopeName+`"},"logRecords":[`...)
		for j, rec := range groups[res] {
			if j > 0 {
				out = append(out, ',')
			}
			out = append(out, rec...)
		}
		out = append(out, "]}]}"...)
	}
	return append(out, "]}"...)
}
