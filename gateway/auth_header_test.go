package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
)

// The Authorization scheme is case-insensitive (RFC 7235 §2.1), and a
// request with two Authorization headers is refused with a code saying
// so, whichever of them is valid.
func TestAuthorizationHeaderForms(t *testing.T) {
	ks, err := ParseKeyStore(strings.NewReader("acme sha256:" + sha256hex("k") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGateway(t, func(c *Config) { c.Keys = ks })
	for _, h := range []string{"Bearer k", "bearer k", "BEARER k", "bEaReR   k"} {
		resp := g.post("/aep/events", "application/json", map[string]string{"Authorization": h}, []byte(dEvent(1, "s")))
		if resp.status != http.StatusAccepted {
			t.Errorf("Authorization %q: %d %s", h, resp.status, resp.body)
		}
	}
	for _, h := range []string{"Basic k", "Bearerk", "k"} {
		resp := g.post("/aep/events", "application/json", map[string]string{"Authorization": h}, []byte(dEvent(1, "s")))
		if resp.status != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d %s", h, resp.status, resp.body)
		}
	}
	for _, path := range []string{"/aep/events", "/events"} {
		req, _ := http.NewRequest(http.MethodPost, g.http.URL+path, strings.NewReader(dEvent(1, "s")))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(aep.HeaderAEPVersion, "0.1")
		req.Header.Add("Authorization", "Bearer k")
		req.Header.Add("Authorization", "Bearer other")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "more than one Authorization header") {
			t.Errorf("%s with two Authorization headers: %d %s", path, resp.StatusCode, body)
		}
	}
}

// Every route that needs a credential answers 401 before 405: a method it
// does not take tells nobody unauthenticated which routes exist.
func TestUnauthenticatedBeforeMethodNotAllowed(t *testing.T) {
	ks, err := ParseKeyStore(strings.NewReader("acme sha256:" + sha256hex("k") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGateway(t, func(c *Config) { c.Keys = ks })
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	g.srv.MountMethod(aep.DialectD, http.MethodGet, "/aep/events", ok)
	g.srv.MountMethod(aep.DialectR, http.MethodGet, "/stream", ok)
	do := func(method, path, auth string) (int, string, http.Header) {
		req, _ := http.NewRequest(method, g.http.URL+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body), resp.Header
	}
	for _, c := range []struct{ method, path, code string }{
		{http.MethodHead, "/aep/events", ""},
		{http.MethodDelete, "/aep/events", aep.CodeDUnauthorized},
		{http.MethodPut, "/events", aep.CodeRUnauthorized},
		{http.MethodPost, "/stream", aep.CodeRUnauthorized},
	} {
		st, body, _ := do(c.method, c.path, "")
		if st != http.StatusUnauthorized || !strings.Contains(body, c.code) {
			t.Errorf("%s %s without a credential: %d %s", c.method, c.path, st, body)
		}
		st, _, hdr := do(c.method, c.path, "Bearer k")
		if st != http.StatusMethodNotAllowed || hdr.Get("Allow") == "" {
			t.Errorf("%s %s with a credential: %d, Allow %q", c.method, c.path, st, hdr.Values("Allow"))
		}
	}
	// Routes without a credential keep their 405.
	if st, _, _ := do(http.MethodPost, "/healthz", ""); st != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz: %d", st)
	}
}

// exp, nbf and iat are bounded: a token that would never expire, or one
// issued in the future, is refused.
func TestJWTTimeClaimsBounded(t *testing.T) {
	now := time.Unix(2_000_000_000, 0)
	secret := []byte(strings.Repeat("s", 32))
	v, err := NewJWTVerifierHMAC(secret)
	if err != nil {
		t.Fatal(err)
	}
	v.now = func() time.Time { return now }
	hdr := map[string]string{"alg": "HS256"}
	n := now.Unix()
	good := []map[string]any{
		{"tenant": "acme", "exp": n + 3600},
		{"tenant": "acme", "exp": n + 3600, "nbf": n - 10, "iat": n - 10},
		{"tenant": "acme", "exp": float64(n) + 0.5},
		{"tenant": "acme", "exp": n + int64(MaxJWTLifetime/time.Second)},
	}
	for _, c := range good {
		if _, err := v.Tenant(signHS(secret, hdr, c)); err != nil {
			t.Errorf("%v refused: %v", c, err)
		}
	}
	bad := []map[string]any{
		{"tenant": "acme", "exp": 9.2e18},
		{"tenant": "acme", "exp": json.Number("1e400")},
		{"tenant": "acme", "exp": -1},
		{"tenant": "acme", "exp": n + int64(MaxJWTLifetime/time.Second) + 3600},
		{"tenant": "acme", "exp": n + 3600, "nbf": -9.2e18},
		{"tenant": "acme", "exp": n + 3600, "nbf": 9.2e18},
		{"tenant": "acme", "exp": n + 3600, "iat": n + 3600},
		{"tenant": "acme", "exp": n + 3600, "iat": -5},
	}
	for _, c := range bad {
		if _, err := v.Tenant(signHS(secret, hdr, c)); err == nil {
			t.Errorf("%v accepted", c)
		}
	}
}
