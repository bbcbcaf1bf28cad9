package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"testing"

	"github.com/aep-gateway/aep-gateway/aep"
)

// The R conformance corpus against a gateway with payload validation on
// (--validate-payloads): the 64 golden events are accepted and stored, every
// single-event invalid case is refused with 400 invalid-event, the payload
// ones naming a data field. With it off a payload case is accepted.
func TestIngestRConformanceWithPayloadValidation(t *testing.T) {
	g := newTestGateway(t, func(c *Config) { c.Limits.Event.ValidatePayloads = true })
	golden, err := os.ReadFile("../aep/testdata/r-golden.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	resp := g.postR("application/x-ndjson", golden)
	if resp.status != http.StatusAccepted {
		t.Fatalf("golden: status %d: %s", resp.status, resp.body)
	}
	if n := resp.json(t)["accepted"].(float64); n != 64 {
		t.Fatalf("golden: %v accepted, want 64: %s", n, resp.body)
	}
	if recs := g.readAll("aep.default.events", 64); len(recs) != 64 {
		t.Fatalf("golden: %d records stored", len(recs))
	}

	b, err := os.ReadFile("../aep/testdata/r-invalid-cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []struct {
			Name  string          `json:"name"`
			Event json.RawMessage `json:"event"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	single, payload := 0, 0
	var payloadCase []byte
	for _, c := range doc.Cases {
		if c.Event == nil {
			continue
		}
		single++
		resp := g.postR("application/json", c.Event)
		body := resp.json(t)
		if resp.status != http.StatusBadRequest || body["error"] != aep.CodeRInvalidEvent {
			t.Errorf("%s: status %d %s, want 400 invalid-event", c.Name, resp.status, resp.body)
			continue
		}
		if f, _ := body["field"].(string); len(f) > 5 && f[:5] == "data." {
			payload++
			payloadCase = c.Event
		}
	}
	if single != 25 || payload != 8 {
		t.Fatalf("%d single-event cases, %d refused on a data field; want 25 and 8", single, payload)
	}

	off := newTestGateway(t, nil)
	if resp := off.postR("application/json", bytes.TrimSpace(payloadCase)); resp.status != http.StatusAccepted {
		t.Fatalf("payload validation off: status %d %s", resp.status, resp.body)
	}
}
