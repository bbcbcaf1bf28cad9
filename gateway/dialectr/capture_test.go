package dialectr_test

import (
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"testing"
)

// The R downlevel fixtures (conformance/fixtures/downlevel, copied into
// aep/testdata) through the whole stack: ingest, Kafka, SSE with a capture
// ceiling.
func TestSSECaptureCeilingDownlevels(t *testing.T) {
	var fx struct {
		Cases []struct {
			Name          string          `json:"name"`
			Ceiling       string          `json:"ceiling"`
			Event         json.RawMessage `json:"event"`
			ExpectCapture string          `json:"expect_capture"`
			ExpectData    json.RawMessage `json:"expect_data"`
		} `json:"cases"`
	}
	b, err := os.ReadFile("../../aep/testdata/r-downlevel-cases.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &fx); err != nil || len(fx.Cases) == 0 {
		t.Fatalf("fixture: %v", err)
	}
	e := newEnv(t, nil)
	for _, c := range fx.Cases {
		t.Run(c.Name, func(t *testing.T) {
			var ev struct{ ID, Type string }
			if err := json.Unmarshal(c.Event, &ev); err != nil {
				t.Fatal(err)
			}
			var compact bytes.Buffer
			_ = json.Compact(&compact, c.Event)
			s := e.getSSE(url.Values{"capture": {c.Ceiling}, "filter": {`{"type":` + mustJSON(ev.Type) + `}`}}, nil)
			asStored := e.getSSE(url.Values{"filter": {`{"type":` + mustJSON(ev.Type) + `}`}}, nil)
			e.post(compact.String())
			m := s.nextEvent()
			var got struct {
				Capture string          `json:"capture"`
				Data    json.RawMessage `json:"data"`
				ID      string          `json:"id"`
			}
			if err := json.Unmarshal([]byte(m.Data), &got); err != nil {
				t.Fatalf("data %q: %v", m.Data, err)
			}
			if got.ID != ev.ID || got.Capture != c.ExpectCapture || !jsonEqual(got.Data, c.ExpectData) {
				t.Fatalf("ceiling %s: got capture %q data %s, want %q %s", c.Ceiling, got.Capture, got.Data, c.ExpectCapture, c.ExpectData)
			}
			// No ceiling: as stored, byte for byte.
			if m := asStored.nextEvent(); m.Data != compact.String() {
				t.Fatalf("no ceiling: got %q, want the stored bytes %q", m.Data, compact.String())
			}
		})
	}
}

// A ceiling at or above the event's level leaves it byte-identical: never
// up-levelled.
func TestSSECaptureNeverUplevels(t *testing.T) {
	e := newEnv(t, nil)
	streams := map[string]*sseClient{}
	for _, c := range []string{"none", "metadata", "redacted", "full"} {
		streams[c] = e.getSSE(url.Values{"capture": {c}}, nil)
	}
	none := `{"aep":"0.1","id":"up-1","type":"tool.requested","time":"2026-07-03T10:14:00.000Z","source":"aep://h/agent/a","agent":"a","session":"s-up","seq":0,"capture":"none"}`
	absent := rEvent("up-2", "s-up", 0, 1) // no capture attribute: metadata
	e.post(none, absent)
	for level, s := range streams {
		if m := s.nextEvent(); m.Data != none {
			t.Errorf("ceiling %s: capture none event became %q", level, m.Data)
		}
		m := s.nextEvent()
		if level == "none" {
			if m.Data == absent || !bytes.Contains([]byte(m.Data), []byte(`"capture":"none"`)) || bytes.Contains([]byte(m.Data), []byte(`"data"`)) {
				t.Errorf("ceiling none: metadata event not down-levelled: %q", m.Data)
			}
			continue
		}
		if m.Data != absent {
			t.Errorf("ceiling %s: metadata event changed: %q", level, m.Data)
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func jsonEqual(a, b json.RawMessage) bool {
	absent := func(r json.RawMessage) bool { return len(r) == 0 || string(r) == "null" }
	if absent(a) || absent(b) {
		return absent(a) && absent(b) // expect_data null: no data member
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}
