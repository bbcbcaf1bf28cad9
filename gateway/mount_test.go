package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

func TestMountAuthenticatesAndIngestWrites(t *testing.T) {
	ks, err := ParseKeyStore(strings.NewReader("acme sha256:" + sha256hex("k") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGateway(t, func(c *Config) { c.Keys = ks })
	g.srv.Mount(aep.DialectD, "/probe", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, TenantFrom(r.Context()))
	}))
	g.srv.MountMethod(aep.DialectD, http.MethodGet, "/aep/events", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "stream")
	}))
	// The GET beside the built-in POST must leave the POST alone.
	if resp := g.post("/aep/events", "application/json", map[string]string{"Authorization": "Bearer k"}, []byte(dEvent(7, "s"))); resp.status != http.StatusAccepted {
		t.Fatalf("POST /aep/events after MountMethod GET: %d %s", resp.status, resp.body)
	}
	sreq, _ := http.NewRequest(http.MethodGet, g.http.URL+"/aep/events", nil)
	sreq.Header.Set("Authorization", "Bearer k")
	sresp, err := http.DefaultClient.Do(sreq)
	if err != nil {
		t.Fatal(err)
	}
	sbody, _ := io.ReadAll(sresp.Body)
	sresp.Body.Close()
	if string(sbody) != "stream" {
		t.Fatalf("GET /aep/events: %d %s", sresp.StatusCode, sbody)
	}
	req, _ := http.NewRequest(http.MethodGet, g.http.URL+"/probe", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unauthenticated mount: %d", resp.StatusCode)
	}
	req.Header.Set("Authorization", "Bearer k")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("authenticated mount: %d", resp.StatusCode)
	}

	res := g.srv.Ingest(context.Background(), tenant.MustParse("acme"), aep.DialectD, [][]byte{
		[]byte(dEvent(0, "s1")), []byte(`{"aep_version":"0.1"}`), []byte(rEvent("s1", 1)),
	})
	if !res[0].Accepted() || res[0].Attrs.Session != "s1" {
		t.Fatalf("valid event: %+v", res[0])
	}
	if res[1].Err == nil || res[1].Err.Code != aep.CodeDInvalidEnvelope || res[2].Err == nil {
		t.Fatalf("invalid events: %+v / %+v", res[1].Err, res[2].Err)
	}
	recs := g.readAll("aep.acme.events", 2)
	found := false
	for _, r := range recs {
		found = found || (r.Offset == res[0].Offset && r.Partition == res[0].Partition && string(r.Value) == dEvent(0, "s1"))
	}
	if len(recs) != 2 || !found {
		t.Fatalf("records %v, result %+v", recs, res[0])
	}
}

// Ingest (WebSocket publishing) is held to the tenant's rate limit like
// HTTP ingest, event by event: over it, results say RateLimited with the
// dialect's limit error and nothing is written.
func TestIngestIsRateLimited(t *testing.T) {
	g := newTestGateway(t, func(c *Config) { c.RateLimit = RateLimit{EventsPerSecond: 1, Burst: 3} })
	ctx := context.Background()
	for i := range 3 {
		if res := g.srv.Ingest(ctx, tenant.MustParse("acme"), aep.DialectD, [][]byte{[]byte(dEvent(i, "s"))}); !res[0].Accepted() || res[0].RateLimited {
			t.Fatalf("event %d within the burst: %+v", i, res[0])
		}
	}
	res := g.srv.Ingest(ctx, tenant.MustParse("acme"), aep.DialectD, [][]byte{[]byte(dEvent(9, "s"))})
	if r := res[0]; !r.RateLimited || r.Accepted() || r.Err == nil || r.Err.Code != aep.CodeDProtocolError || !r.Err.Retryable || r.RetryAfter <= 0 {
		t.Fatalf("D event over the rate: %+v / %+v", r, r.Err)
	}
	res = g.srv.Ingest(ctx, tenant.MustParse("acme"), aep.DialectR, [][]byte{[]byte(rEvent("s", 1))})
	if r := res[0]; !r.RateLimited || r.Err == nil || r.Err.Code != aep.CodeRLimitExceeded {
		t.Fatalf("R event over the rate: %+v", r)
	}
	// Events handed over together (a WebSocket's pipe) each stand alone:
	// of four with a burst of three, the first three are written and the
	// last is refused as any event over the rate (retryable), not the four
	// as a batch that can never pass.
	big := [][]byte{[]byte(dEvent(10, "s")), []byte(dEvent(11, "s")), []byte(dEvent(12, "s")), []byte(dEvent(13, "s"))}
	res = g.srv.Ingest(ctx, tenant.MustParse("globex"), aep.DialectD, big)
	for i, r := range res[:3] {
		if !r.Accepted() {
			t.Fatalf("globex event %d of 4, within the burst: %+v", i, r)
		}
	}
	if r := res[3]; !r.RateLimited || r.Accepted() || !r.Err.Retryable || r.RetryAfter <= 0 {
		t.Fatalf("globex event 4 of 4, over the burst: %+v / %+v", r, r.Err)
	}
	// The limit is per tenant.
	if r := g.srv.Ingest(ctx, tenant.MustParse("initech"), aep.DialectD, [][]byte{[]byte(dEvent(20, "s"))}); !r[0].Accepted() {
		t.Fatalf("initech: %+v", r[0])
	}
	if n := len(g.readAll("aep.acme.events", 3)); n != 3 {
		t.Fatalf("acme records: %d, want the 3 within the burst", n)
	}
	if n := len(g.readAll("aep.globex.events", 3)); n != 3 {
		t.Fatalf("globex records: %d, want the 3 within the burst", n)
	}
}
