package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/principal"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// An event whose tenant_id names another tenant, or that carries an
// event-level authorization (no scheme is supported: the transport's
// credential authenticates), is refused with unauthorized and not written:
// its token never reaches the log. tenant_id equal to the authenticated
// tenant, or null, and a payload that merely contains the words, pass.
func TestIngestDEnvelopeTenantAndAuthorization(t *testing.T) {
	g := newTestGateway(t, nil)
	with := func(i int, members string) string {
		return strings.Replace(dEvent(i, "s"), `"aep_version":"0.1",`, `"aep_version":"0.1",`+members+`,`, 1)
	}
	events := []string{
		with(0, `"tenant_id":"org_other"`),
		with(1, `"authorization":{"scheme":"weird","token":"s3cr3t-token"}`),
		with(2, `"authorization":{"scheme":"bearer","token":"s3cr3t-token"}`),
		with(3, `"tenant_id":"default"`),
		with(4, `"tenant_id":null,"authorization":null`),
		strings.Replace(dEvent(5, "s"), `"payload":{"i":5}`, `"payload":{"tenant_id":"org_other","authorization":"x"}`, 1),
		with(6, `"tenant_id":7`),
		with(7, `"tenant\u005fid":"org_other"`),
	}
	resp := g.post("/aep/events", "application/x-ndjson", nil, []byte(strings.Join(events, "\n")+"\n"))
	if resp.status != http.StatusAccepted {
		t.Fatalf("status %d: %s", resp.status, resp.body)
	}
	var out dIngestResponse
	if err := json.Unmarshal(resp.body, &out); err != nil {
		t.Fatal(err)
	}
	refused := map[int]string{}
	for _, e := range out.Errors {
		if e.Error.Code != "unauthorized" || e.Error.Retryable {
			t.Errorf("event %d: %+v, want unauthorized, not retryable", e.EventIndex, e.Error)
		}
		refused[e.EventIndex] = e.Error.Message
	}
	if len(refused) != 5 || refused[0] == "" || refused[1] == "" || refused[2] == "" || refused[6] == "" || refused[7] == "" || out.Accepted != 3 {
		t.Fatalf("refused %v, accepted %d; want events 0, 1, 2, 6 and 7 (an escaped name) refused: %s", refused, out.Accepted, resp.body)
	}
	if !strings.Contains(refused[1], `scheme "weird"`) || !strings.Contains(refused[0], "org_other") {
		t.Errorf("messages %q, %q: want the scheme and the claimed tenant named", refused[1], refused[0])
	}
	for _, r := range g.readAll("aep.default.events", 3) {
		if strings.Contains(string(r.Value), "s3cr3t-token") || strings.Contains(string(r.Value), `"tenant_id":"org_other",`) {
			t.Fatalf("a refused event is in the log: %s", r.Value)
		}
	}
}

// BenchmarkPublisherCheck: what the check costs an event without either
// envelope member (the common case: the parser's mark is 0), one with
// tenant_id, and an event checked against a restricted principal's scopes
// (issue 24: enforcement must not be measurable on ingest).
func BenchmarkPublisherCheck(b *testing.B) {
	plain := outcome{frame: frame{raw: []byte(dEvent(1, "s"))}, attrs: aep.Attrs{Source: "agent:a", Type: "task.progress"}}
	named := outcome{frame: frame{raw: []byte(strings.Replace(dEvent(1, "s"), `"aep_version":"0.1",`, `"aep_version":"0.1","tenant_id":"default",`, 1))},
		attrs: aep.Attrs{Source: "agent:a", Claims: aep.ClaimTenantID}}
	sc, err := principal.ParseScopes("emit:agent:a write:agent subscribe:task.* read:*")
	if err != nil {
		b.Fatal(err)
	}
	open := tenant.MustParse("default")
	scoped := open.WithPrincipal(&principal.Principal{ID: "agent-a", Method: principal.MethodAPIKey, Scopes: sc})
	for _, c := range []struct {
		name string
		t    tenant.Tenant
		o    outcome
	}{{"plain", open, plain}, {"tenant_id", open, named}, {"scoped", scoped, plain}} {
		b.Run(c.name, func(b *testing.B) {
			outs := []outcome{c.o}
			b.ReportAllocs()
			for range b.N {
				outs[0].parseErr = nil
				if checkPublisher(aep.DialectD, c.t, nil, outs) != 0 {
					b.Fatal(outs[0].parseErr)
				}
			}
		})
	}
}

// versioning.md: an event refused for its aep_version names the versions
// accepted in details.supported, on HTTP ingest as in the WebSocket's
// session.error.
func TestIngestDVersionRefusalListsSupported(t *testing.T) {
	g := newTestGateway(t, nil)
	ev := strings.Replace(dEvent(1, "s"), `"aep_version":"0.1"`, `"aep_version":"0.2"`, 1)
	resp := g.post("/aep/events", "application/json", nil, []byte(ev))
	var out dIngestResponse
	if err := json.Unmarshal(resp.body, &out); err != nil || len(out.Errors) != 1 {
		t.Fatalf("%d %s", resp.status, resp.body)
	}
	e := out.Errors[0].Error
	if e.Code != "unsupported_version" || !strings.Contains(string(resp.body), `"supported":["0.1"]`) {
		t.Fatalf("refusal %+v: %s", e, resp.body)
	}
}
