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

// An event-level bearer authorization is verified as the Authorization
// header would be (issue 24): a token of the same tenant whose principal
// may publish the event is accepted, the member cut from the stored bytes
// (escaped spellings too) and its principal named in aep-event-principal;
// an unknown token, another tenant's, or one whose scopes refuse the
// event is refused unauthorized, nothing written.
func TestIngestDEventBearerAuthorization(t *testing.T) {
	ks, err := ParseKeyStore(strings.NewReader(
		"acme sha256:" + sha256hex("k-gw") + " principal=relay\n" +
			"acme sha256:" + sha256hex("k-agent") + " principal=agent-r scopes=emit:agent:researcher,write:tool\n" +
			"acme sha256:" + sha256hex("k-other") + " principal=other scopes=emit:agent:other\n" +
			"globex sha256:" + sha256hex("k-globex") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGateway(t, func(c *Config) { c.Keys = ks })
	with := func(i int, member string) string {
		return strings.Replace(dEvent(i, "s"), `"aep_version":"0.1",`, `"aep_version":"0.1",`+member+`,`, 1)
	}
	events := []string{
		with(0, `"authorization":{"scheme":"Bearer","token":"k-agent"}`),
		with(1, `"authoriz\u0061tion":{"scheme":"bearer","token":"k-agent"}`),
		with(2, `"authorization":{"scheme":"bearer","token":"k-unknown"}`),
		with(3, `"authorization":{"scheme":"bearer","token":"k-globex"}`),
		with(4, `"authorization":{"scheme":"bearer","token":"k-other"}`),
	}
	resp := g.post("/aep/events", "application/x-ndjson", map[string]string{"Authorization": "Bearer k-gw"}, []byte(strings.Join(events, "\n")+"\n"))
	var out dIngestResponse
	if err := json.Unmarshal(resp.body, &out); err != nil || resp.status != http.StatusAccepted {
		t.Fatalf("%d %s", resp.status, resp.body)
	}
	if out.Accepted != 2 || len(out.Errors) != 3 {
		t.Fatalf("accepted %d, errors %+v: want events 0 and 1 in", out.Accepted, out.Errors)
	}
	for _, e := range out.Errors {
		if e.Error.Code != "unauthorized" || e.EventIndex < 2 {
			t.Errorf("event %d: %+v", e.EventIndex, e.Error)
		}
	}
	for _, r := range g.readAll("aep.acme.events", 2) {
		if strings.Contains(string(r.Value), "k-agent") || strings.Contains(string(r.Value), "authoriz") {
			t.Errorf("the token reached the log: %s", r.Value)
		}
		var ev map[string]any
		if err := json.Unmarshal(r.Value, &ev); err != nil || ev["source"] != "agent:researcher" {
			t.Errorf("the stored event is not the event without its authorization: %s (%v)", r.Value, err)
		}
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		if h[partitioning.HeaderEventPrincipal] != "agent-r" || h[partitioning.HeaderPrincipal] != "relay" {
			t.Errorf("headers %v: want aep-event-principal agent-r, aep-principal relay", h)
		}
	}
}

// cutMember removes every top-level member of the name, whatever its
// place and spelling, and leaves a valid object.
func TestCutMember(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":1,"authorization":{"x":[1,2]},"b":2}`:        `{"a":1,"b":2}`,
		`{"authorization":null}`:                           `{}`,
		`{"a":1,"authorization":"t"}`:                      `{"a":1}`,
		` {"authorization":"t" , "a":{"authorization":1}}`: ` {"a":{"authorization":1}}`,
		`{"authorization":1,"authoriz\u0061tion":2,"c":3}`: `{"c":3}`,
	} {
		got, ok := cutMember([]byte(in), "authorization")
		if !ok || string(got) != want || !json.Valid(got) {
			t.Errorf("cutMember(%s) = %s %v, want %s", in, got, ok, want)
		}
	}
}
