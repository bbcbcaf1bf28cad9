package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/aep-gateway/aep-gateway/partitioning"
)

// principalKeys is a key file with two principals of tenant acme: an
// agent bound to agent:researcher (and R's claude-code) that may send to
// tools, and a dashboard that may only subscribe to task.*; and a key of
// the same tenant without scopes (tenant-wide, as keys were before).
func principalKeys(t *testing.T) *KeyStore {
	t.Helper()
	ks, err := ParseKeyStore(strings.NewReader(
		"acme sha256:" + sha256hex("k-agent") + " principal=agent-researcher scopes=emit:agent:researcher,emit:claude-code,write:tool\n" +
			"acme sha256:" + sha256hex("k-dash") + " principal=dashboard scopes=subscribe:task.*,read:*\n" +
			"acme sha256:" + sha256hex("k-any") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// Dialect D: each event the principal may not publish (another source, a
// target outside write:) is refused unauthorized on its own, nothing of it
// written; the others land, and every record names who published it.
func TestIngestDPrincipalScopes(t *testing.T) {
	g := newTestGateway(t, func(c *Config) { c.Keys = principalKeys(t) })
	spoof := strings.Replace(dEvent(1, "s"), `"source":"agent:researcher"`, `"source":"agent:other"`, 1)
	toUI := strings.Replace(dEvent(2, "s"), `"target":"tool:crawler"`, `"target":"agent:ui"`, 1)
	body := strings.Join([]string{dEvent(0, "s"), spoof, toUI}, "\n") + "\n"
	resp := g.post("/aep/events", "application/x-ndjson", map[string]string{"Authorization": "Bearer k-agent"}, []byte(body))
	if resp.status != http.StatusAccepted {
		t.Fatalf("status %d: %s", resp.status, resp.body)
	}
	var out dIngestResponse
	if err := json.Unmarshal(resp.body, &out); err != nil {
		t.Fatal(err)
	}
	if out.Accepted != 1 || len(out.Errors) != 2 {
		t.Fatalf("accepted %d, errors %+v: want event 0 in, 1 and 2 refused", out.Accepted, out.Errors)
	}
	for _, e := range out.Errors {
		if e.Error.Code != "unauthorized" || e.Error.Retryable {
			t.Errorf("event %d: %+v", e.EventIndex, e.Error)
		}
	}
	if m := out.Errors[0].Error.Message; !strings.Contains(m, `"agent:other"`) || !strings.Contains(m, `"agent-researcher"`) {
		t.Errorf("message %q: want the principal and the refused source named", m)
	}
	if m := out.Errors[1].Error.Message; !strings.Contains(m, `"agent:ui"`) {
		t.Errorf("message %q: want the refused target named", m)
	}
	// The dashboard may not publish at all; the tenant-wide key may as anyone.
	if r := g.post("/aep/events", "application/json", map[string]string{"Authorization": "Bearer k-dash"}, []byte(dEvent(3, "s"))); r.status != http.StatusAccepted || !strings.Contains(string(r.body), "unauthorized") {
		t.Fatalf("dashboard publish: %d %s", r.status, r.body)
	}
	if r := g.post("/aep/events", "application/json", map[string]string{"Authorization": "Bearer k-any"}, []byte(spoof)); r.status != http.StatusAccepted || strings.Contains(string(r.body), "unauthorized") {
		t.Fatalf("tenant-wide key: %d %s", r.status, r.body)
	}
	recs := g.readAll("aep.acme.events", 2)
	want := []map[string]string{
		{partitioning.HeaderPrincipal: "agent-researcher", partitioning.HeaderAuth: "api_key", partitioning.HeaderVia: "http", partitioning.HeaderSource: "agent:researcher"},
		{partitioning.HeaderAuth: "api_key", partitioning.HeaderVia: "http", partitioning.HeaderSource: "agent:other"},
	}
	for i, r := range recs {
		got := map[string]string{}
		for _, h := range r.Headers {
			got[h.Key] = string(h.Value)
		}
		for k, v := range want[i] {
			if got[k] != v {
				t.Errorf("record %d header %s = %q, want %q", i, k, got[k], v)
			}
		}
		if i == 1 && !strings.HasPrefix(got[partitioning.HeaderPrincipal], "key:") {
			t.Errorf("a key without principal= is named by its digest: %q", got[partitioning.HeaderPrincipal])
		}
	}
}

// Dialect R: AEP-0003's batch rule: one event the principal may not
// publish refuses the whole batch with 403 unauthorized, nothing written.
func TestIngestRPrincipalScopes(t *testing.T) {
	g := newTestGateway(t, func(c *Config) { c.Keys = principalKeys(t) })
	hdr := map[string]string{"Authorization": "Bearer k-agent", "AEP-Version": "0.1"}
	other := strings.Replace(rEvent("s", 2), `"agent":"claude-code"`, `"agent":"codex"`, 1)
	resp := g.post("/events", "application/x-ndjson", hdr, []byte(rEvent("s", 1)+"\n"+other+"\n"))
	if resp.status != http.StatusForbidden || !strings.Contains(string(resp.body), `"unauthorized"`) || !strings.Contains(string(resp.body), `codex`) {
		t.Fatalf("batch with another agent: %d %s", resp.status, resp.body)
	}
	if n := g.records("aep.acme.events"); n != 0 {
		t.Fatalf("%d records written from a refused batch", n)
	}
	if r := g.post("/events", "application/x-ndjson", hdr, []byte(rEvent("s", 1)+"\n")); r.status != http.StatusAccepted {
		t.Fatalf("own agent: %d %s", r.status, r.body)
	}
}
