package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
)

// fixtureLines are the non-empty lines of a JSON Lines fixture.
func fixtureLines(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if l = bytes.TrimSpace(l); len(l) > 0 {
			out = append(out, l)
		}
	}
	return out
}

func canonJSON(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return v
}

// AEP CloudEvents posted to /events in the three HTTP binding modes
// (structured, batch, binary) are stored as the dialect R events they map
// to: the golden events of the spec's fixtures, bit for bit modulo member
// order and number spelling.
func TestIngestCloudEvents(t *testing.T) {
	g := newTestGateway(t, nil)
	golden := fixtureLines(t, "../aep/testdata/r-golden.jsonl")
	ces := fixtureLines(t, "../aep/testdata/r-ce-expected.jsonl")
	want := [][]byte{}

	// structured, one a request, no AEP-Version header
	for i := range 4 {
		resp := g.post("/events", mediaCE, nil, ces[i])
		if resp.status != http.StatusAccepted {
			t.Fatalf("structured %d: %d %s", i, resp.status, resp.body)
		}
		want = append(want, golden[i])
	}
	// a batch
	batch := []byte("[" + string(bytes.Join(ces[4:9], []byte(","))) + "]")
	resp := g.post("/events", mediaCEBatch+"; charset=utf-8", nil, batch)
	if resp.status != http.StatusAccepted || resp.json(t)["accepted"] != float64(5) {
		t.Fatalf("batch: %d %s", resp.status, resp.body)
	}
	want = append(want, golden[4:9]...)
	// binary mode: golden[9] (integers in headers, data in the body)
	var ce map[string]json.RawMessage
	if err := json.Unmarshal(ces[9], &ce); err != nil {
		t.Fatal(err)
	}
	hdr := map[string]string{}
	for k, v := range ce {
		if k == "data" || k == "datacontenttype" {
			continue
		}
		var s any
		_ = json.Unmarshal(v, &s)
		switch x := s.(type) {
		case string:
			hdr["ce-"+k] = x
		case float64:
			hdr["ce-"+k] = strings.TrimSuffix(strings.TrimSuffix(string(v), ".0"), " ")
		}
	}
	resp = g.post("/events", "application/json", hdr, ce["data"])
	if resp.status != http.StatusAccepted {
		t.Fatalf("binary: %d %s", resp.status, resp.body)
	}
	want = append(want, golden[9])
	// a retry of an event stored already is answered, not written again
	if resp := g.post("/events", mediaCE, nil, ces[0]); resp.status != http.StatusAccepted {
		t.Fatalf("retry: %d %s", resp.status, resp.body)
	}

	recs := g.readAll("aep.default.events", len(want))
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d", len(recs), len(want))
	}
	got := map[string]int{}
	for _, r := range recs {
		got[string(mustCanon(t, r.Value))]++
	}
	for i, w := range want {
		if got[string(mustCanon(t, w))] == 0 {
			t.Errorf("event %d (%s) not stored as its golden form", i, w[:60])
		}
	}
}

func mustCanon(t *testing.T, b []byte) []byte {
	t.Helper()
	out, err := json.Marshal(canonJSON(t, b))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// CloudEvents that are not AEP's, or not CloudEvents 1.0, are refused
// whole with invalid-event naming the event; nothing is written. An
// extension attribute AEP cannot carry is dropped and named.
func TestIngestCloudEventsRefused(t *testing.T) {
	g := newTestGateway(t, nil)
	ces := fixtureLines(t, "../aep/testdata/r-ce-expected.jsonl")
	foreign := `{"specversion":"1.0","id":"o1","source":"shop","type":"com.example.order.created","data":{}}`
	for name, c := range map[string]struct {
		ctype, body string
		hdr         map[string]string
		detail      string
	}{
		"foreign type":        {mediaCE, foreign, nil, "dev.aep"},
		"foreign in a batch":  {mediaCEBatch, "[" + string(ces[0]) + "," + foreign + "]", nil, "event 1"},
		"specversion 0.3":     {mediaCE, strings.Replace(string(ces[0]), `"specversion":"1.0"`, `"specversion":"0.3"`, 1), nil, "specversion"},
		"binary, not json":    {"application/json", "not json", map[string]string{"ce-specversion": "1.0", "ce-type": "dev.aep.run.started"}, "not JSON"},
		"binary, bad integer": {"application/json", "{}", map[string]string{"ce-specversion": "1.0", "ce-type": "dev.aep.run.started", "ce-aepsequence": "one"}, "not an integer"},
		"invalid once mapped": {mediaCE, strings.Replace(string(ces[0]), `"aepseverity":"info"`, `"aepseverity":"loud"`, 1), nil, "severity"},
	} {
		resp := g.post("/events", c.ctype, c.hdr, []byte(c.body))
		body := resp.json(t)
		named := strings.Contains(body["detail"].(string), c.detail) || body["field"] == c.detail
		if resp.status != http.StatusBadRequest || body["error"] != "invalid-event" || !named {
			t.Errorf("%s: %d %s, want 400 invalid-event naming %q", name, resp.status, resp.body, c.detail)
		}
	}
	if n := g.records("aep.default.events"); n != 0 {
		t.Fatalf("%d records written by refused requests", n)
	}
	b, err := os.ReadFile("../aep/testdata/r-ce-inbound-cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []struct {
			CE json.RawMessage `json:"ce"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	resp := g.post("/events", mediaCE, nil, doc.Cases[2].CE)
	diags, _ := resp.json(t)["diagnostics"].([]any)
	if resp.status != http.StatusAccepted || len(diags) != 1 || !strings.Contains(diags[0].(string), `"aep_bad"`) {
		t.Fatalf("an illegal extension name: %d %s", resp.status, resp.body)
	}
	if g.records("aep.default.events") != 1 {
		t.Fatal("the event with a dropped extension was not written")
	}
}
