package gatewaytest

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// OTLP/HTTP JSON read back into AEP-0005's data-model form (the form of
// aep/testdata/r-otlp-expected.json), so a test can compare what a receiver
// got with the pins: a decoder independent of the bridge's encoder.

type otlpAny struct {
	StringValue *string                     `json:"stringValue"`
	BoolValue   *bool                       `json:"boolValue"`
	IntValue    *json.Number                `json:"intValue"` // a string or a number in the JSON mapping
	DoubleValue *float64                    `json:"doubleValue"`
	ArrayValue  *struct{ Values []otlpAny } `json:"arrayValue"`
	KvlistValue *struct{ Values []otlpKV }  `json:"kvlistValue"`
}

type otlpKV struct {
	Key   string  `json:"key"`
	Value otlpAny `json:"value"`
}

func (v otlpAny) plain() (any, error) {
	switch {
	case v.StringValue != nil:
		return *v.StringValue, nil
	case v.BoolValue != nil:
		return *v.BoolValue, nil
	case v.IntValue != nil:
		n, err := strconv.ParseInt(v.IntValue.String(), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("intValue %q: %w", v.IntValue.String(), err)
		}
		return float64(n), nil
	case v.DoubleValue != nil:
		return *v.DoubleValue, nil
	case v.ArrayValue != nil:
		out := []any{}
		for _, e := range v.ArrayValue.Values {
			p, err := e.plain()
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
		return out, nil
	case v.KvlistValue != nil:
		return kvPlain(v.KvlistValue.Values)
	}
	return nil, nil
}

func kvPlain(kvs []otlpKV) (map[string]any, error) {
	out := map[string]any{}
	for _, kv := range kvs {
		p, err := kv.Value.plain()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kv.Key, err)
		}
		out[kv.Key] = p
	}
	return out, nil
}

// OTLPLogsToPins reads one ExportLogsServiceRequest (OTLP/HTTP JSON: what
// a collector's file exporter writes per line, and what a receiver gets)
// into its LogRecords in the pins' form, resource attributes included.
func OTLPLogsToPins(body []byte) ([]map[string]any, error) {
	var req struct {
		ResourceLogs []struct {
			Resource struct {
				Attributes []otlpKV `json:"attributes"`
			} `json:"resource"`
			ScopeLogs []struct {
				LogRecords []struct {
					TimeUnixNano   json.Number `json:"timeUnixNano"`
					EventName      string      `json:"eventName"`
					SeverityText   string      `json:"severityText"`
					SeverityNumber float64     `json:"severityNumber"`
					TraceID        string      `json:"traceId"`
					SpanID         string      `json:"spanId"`
					Flags          *float64    `json:"flags"`
					Attributes     []otlpKV    `json:"attributes"`
					Body           *otlpAny    `json:"body"`
				} `json:"logRecords"`
			} `json:"scopeLogs"`
		} `json:"resourceLogs"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("otlp logs: %w", err)
	}
	var out []map[string]any
	for _, rl := range req.ResourceLogs {
		res, err := kvPlain(rl.Resource.Attributes)
		if err != nil {
			return nil, err
		}
		for _, sl := range rl.ScopeLogs {
			for _, lr := range sl.LogRecords {
				ns, err := strconv.ParseInt(lr.TimeUnixNano.String(), 10, 64)
				if err != nil {
					return nil, fmt.Errorf("timeUnixNano %q: %w", lr.TimeUnixNano.String(), err)
				}
				attrs, err := kvPlain(lr.Attributes)
				if err != nil {
					return nil, err
				}
				m := map[string]any{"time_unix_nano": float64(ns), "event_name": lr.EventName, "severity_text": lr.SeverityText,
					"severity_number": lr.SeverityNumber, "resource": res, "attributes": attrs}
				if lr.TraceID != "" {
					m["trace_id"] = lr.TraceID
				}
				if lr.SpanID != "" {
					m["span_id"] = lr.SpanID
				}
				if lr.Flags != nil {
					m["flags"] = *lr.Flags
				}
				if lr.Body != nil { // an empty AnyValue (the collector writes "body":{}) is no body
					b, err := lr.Body.plain()
					if err != nil {
						return nil, err
					}
					if b != nil {
						m["body"] = b
					}
				}
				out = append(out, m)
			}
		}
	}
	return out, nil
}
