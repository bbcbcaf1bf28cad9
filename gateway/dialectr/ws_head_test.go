package dialectr

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/aep-gateway/aep-gateway/aep"
)

// headByJSON is what handle decided before the scan: encoding/json's
// reading of the frame's type and id.
func headByJSON(data []byte) (id string, event bool) {
	var head struct {
		Type string `json:"type"`
		ID   any    `json:"id"`
	}
	if json.Unmarshal(data, &head) != nil || !strings.Contains(head.Type, ".") || aep.IsCommandR(head.Type) {
		return "", false
	}
	id, _ = head.ID.(string)
	return id, true
}

var headSeeds = []string{
	`{"aep":"0.1","id":"e-1","type":"tool.requested","session":"s"}`,
	` {"type":"progress.update","id":"x"} `,
	`{"id":"a\"b\u00e9","type":"tool.requested"}`,
	`{"type":"tool.requested","id":7}`,
	`{"type":"tool.requested"}`,
	`{"type":"ping","t":1}`,
	`{"type":"subscribe","id":"s"}`,
	`{"type":"control.pause","id":"c-1"}`,
	`{"type":"attention.routed","id":"r-1"}`,
	`{"TYPE":"tool.requested","id":"x"}`,
	`{"type":"tool.requested","Id":"y","id":"x"}`,
	`{"t\u0079pe":"tool.requested","id":"x"}`,
	`{"type":"tool.requested","type":"ping"}`,
	`{"type":"ping","type":"tool.requested","id":"z"}`,
	`{"type":"tool\u002erequested","id":"x"}`,
	`{"type":"tool.requested","id":"x","data":{"type":"nested.x","id":"inner"}}`,
	`{"type":5,"id":"x"}`,
	`{"type":"tool.requested","id":"x"`,
	`{"type":"tool.requested","id":"x"} trailing`,
	`[{"type":"tool.requested"}]`,
	`{"type":"tool.requested","id":"x","a":[1,2}`,
	`{"type":"tool.requested","id":null}`,
	``,
	`"tool.requested"`,
}

// Where the scan decides, it decides what encoding/json decided, on any
// bytes that are one valid JSON document. (Invalid documents the scan may
// pass as events: the ingest then refuses them as syntax errors, and
// event() ignores those as handle ignored unparseable frames; tested over a
// socket in TestWSUnparseableEventFramesIgnored.)
func TestEventHeadAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range headSeeds {
		checkHead(t, []byte(s))
	}
}

func FuzzEventHead(f *testing.F) {
	for _, s := range headSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkHead(t, b) })
}

func checkHead(t *testing.T, b []byte) {
	id, ok := eventHead(b)
	if !ok || !json.Valid(b) {
		return // handle falls back to encoding/json, or the ingest refuses the syntax
	}
	wantID, event := headByJSON(b)
	if !event || id != wantID {
		t.Fatalf("%s: scan says event id %q; encoding/json says event %v id %q", b, id, event, wantID)
	}
}

func TestEventHeadDefersWhatItCannotTell(t *testing.T) {
	for _, s := range []string{
		`{"TYPE":"tool.requested","id":"x"}`,
		`{"type":"tool.requested","Id":"y","id":"x"}`,
		`{"t\u0079pe":"tool.requested","id":"x"}`,
		`{"type":"tool\u002erequested","id":"x"}`,
		`{"type":"control.pause","id":"c-1"}`,
		`{"type":"ping","t":1}`,
		`{"type":5,"id":"x"}`,
		`{"type":"tool.requested","id":"x"`,
	} {
		if _, ok := eventHead([]byte(s)); ok {
			t.Errorf("%s: scanned as an event; want encoding/json to decide", s)
		}
	}
	if id, ok := eventHead([]byte(`{"id":"a\"b\u00e9","type":"tool.requested"}`)); !ok || id != "a\"bé" {
		t.Errorf("escaped id: got %q %v", id, ok)
	}
}

func BenchmarkFrameHead(b *testing.B) {
	frame := []byte(`{"aep":"0.1","id":"01JBENCH00000000000000000","type":"tool.requested","ts":"2026-12-04T10:00:00.000Z","session":"sess-000042","source":{"agent":"bench","instance":"i-1"},"data":{"tool":"search","args":{"q":"kafka partitions per tenant","limit":10}}}`)
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := eventHead(frame); !ok {
				b.Fatal("not an event")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) { // the decode handle made before the scan
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := headByJSON(frame); !ok {
				b.Fatal("not an event")
			}
		}
	})
}
