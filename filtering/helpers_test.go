package filtering

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/aep-gateway/aep-gateway/aep"
)

// rCore are the dialect R core attribute names; every other top-level
// member of an event is an extension attribute.
var rCore = map[string]bool{
	"aep": true, "id": true, "type": true, "subject": true, "time": true, "source": true,
	"agent": true, "session": true, "run": true, "step": true, "seq": true, "epoch": true,
	"cause": true, "traceparent": true, "severity": true, "capture": true, "data": true,
}

// rAttrs builds the routing attributes of a dialect R event given as JSON,
// the way the header decoder presents them: strings as given, absent as "",
// extension attributes raw.
func rAttrs(t testing.TB, event string) *aep.Attrs {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(event), &m); err != nil {
		t.Fatalf("event %s: %v", event, err)
	}
	a := &aep.Attrs{Dialect: aep.DialectR}
	str := func(k string) string {
		var s string
		if raw, ok := m[k]; ok {
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatalf("event %s: %s: %v", event, k, err)
			}
		}
		return s
	}
	a.ID, a.Type, a.Subject, a.Source = str("id"), str("type"), str("subject"), str("source")
	a.Agent, a.Session, a.Run, a.Step = str("agent"), str("session"), str("run"), str("step")
	a.Cause, a.Severity, a.Capture = str("cause"), str("severity"), str("capture")
	if raw, ok := m["epoch"]; ok {
		a.HasEpoch = true
		if err := json.Unmarshal(raw, &a.Epoch); err != nil {
			t.Fatalf("event %s: epoch: %v", event, err)
		}
	}
	if raw, ok := m["seq"]; ok {
		a.HasSeq = true
		if err := json.Unmarshal(raw, &a.Seq); err != nil {
			t.Fatalf("event %s: seq: %v", event, err)
		}
	}
	// Document order is not kept by a map; tests do not depend on it.
	for k, raw := range m {
		if !rCore[k] {
			a.Ext = append(a.Ext, aep.Ext{Name: k, Value: raw})
		}
	}
	return a
}

// filterErr asserts err is a filter *Error with the given code.
func filterErr(t *testing.T, err error, d aep.Dialect, code string) *Error {
	t.Helper()
	var fe *Error
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *filtering.Error", err, err)
	}
	if fe.Code != code || fe.Dialect != d {
		t.Fatalf("error %v: code %q dialect %v, want %q %v", err, fe.Code, fe.Dialect, code, d)
	}
	if fe.Message == "" {
		t.Fatalf("error without a message")
	}
	return fe
}

func mustD(t testing.TB, js string) *Filter {
	t.Helper()
	f, err := ParseD([]byte(js))
	if err != nil {
		t.Fatalf("ParseD(%s): %v", js, err)
	}
	return f
}

func mustR(t testing.TB, js string) *Filter {
	t.Helper()
	f, err := ParseR([]byte(js))
	if err != nil {
		t.Fatalf("ParseR(%s): %v", js, err)
	}
	return f
}
