package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestParseCORSOrigins(t *testing.T) {
	got, err := ParseCORSOrigins(" https://App.example.com , http://localhost:3000,https://*.example.org,")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"https://app.example.com", "http://localhost:3000", "https://*.example.org"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("parsed %q, want %q", got, want)
	}
	if ws := WebSocketOriginPatterns(got); strings.Join(ws, " ") != "app.example.com localhost:3000 *.example.org" {
		t.Fatalf("websocket patterns %q", ws)
	}
	if o, err := ParseCORSOrigins(""); err != nil || len(o) != 0 {
		t.Fatalf("empty list: %q %v", o, err)
	}
	for _, bad := range []string{"*", "null", "app.example.com", "ftp://x.example", "https://x.example/path", "https://a.*.example", "https://*", "https://u@x.example", "https://x.example?q=1"} {
		if _, err := ParseCORSOrigins(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	allowed := newCORS([]string{"https://app.example.com", "https://*.example.org"})
	if newCORS(nil) != nil {
		t.Fatal("no origins built a CORS handler (rs/cors reads none as all)")
	}
	for origin, ok := range map[string]bool{
		"https://app.example.com": true, "https://APP.example.com": true, "http://app.example.com": false,
		"https://app.example.com:8443": false, "https://a.example.org": true, "https://a.b.example.org": true,
		"https://example.org": false, "https://evilexample.org": false, "http://a.example.org": false, "null": false,
	} {
		r, _ := http.NewRequest(http.MethodGet, "http://gw/", nil)
		r.Header.Set("Origin", origin)
		if allowed.OriginAllowed(r) != ok {
			t.Errorf("origin %s: allowed=%v, want %v", origin, !ok, ok)
		}
	}
}

func corsDo(t *testing.T, method, url string, hdr map[string]string, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestCORS(t *testing.T) {
	ks, err := ParseKeyStore(strings.NewReader("acme sha256:" + sha256hex("k") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	origins, _ := ParseCORSOrigins("https://app.example.com,https://*.tools.example.com")
	g := newTestGateway(t, func(c *Config) { c.Keys = ks; c.CORSOrigins = origins })
	url := g.http.URL + "/aep/events"

	// Preflight from an allowed origin, for a POST with a token: 204
	// without authentication.
	resp := corsDo(t, http.MethodOptions, url, map[string]string{
		"Origin": "https://x.tools.example.com", "Access-Control-Request-Method": "POST",
		"Access-Control-Request-Headers": "aep-version,authorization,content-type,last-event-id",
	}, "")
	h := resp.Header
	if resp.StatusCode != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "https://x.tools.example.com" ||
		!strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") || h.Get("Access-Control-Allow-Credentials") != "" {
		t.Fatalf("preflight: %d %v", resp.StatusCode, h)
	}
	for _, want := range []string{"authorization", "content-type", "last-event-id", "aep-version"} {
		if !strings.Contains(strings.ToLower(h.Get("Access-Control-Allow-Headers")), want) {
			t.Errorf("Allow-Headers %q lacks %s", h.Get("Access-Control-Allow-Headers"), want)
		}
	}
	if !strings.Contains(strings.Join(h.Values("Vary"), ","), "Origin") {
		t.Errorf("preflight Vary: %q", h.Values("Vary"))
	}

	// The request itself: readable by that origin.
	resp = corsDo(t, http.MethodPost, url, map[string]string{
		"Origin": "https://app.example.com", "Authorization": "Bearer k", "Content-Type": "application/json",
	}, dEvent(1, "s"))
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "Retry-After") {
		t.Fatalf("cross-origin POST from an allowed origin: %d %v", resp.StatusCode, resp.Header)
	}

	// Another origin: preflight and request refused, nothing written.
	resp = corsDo(t, http.MethodOptions, url, map[string]string{"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}, "")
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight from another origin: %d %v", resp.StatusCode, resp.Header)
	}
	resp = corsDo(t, http.MethodPost, url, map[string]string{
		"Origin": "https://evil.example", "Authorization": "Bearer k", "Content-Type": "application/json",
	}, dEvent(2, "s"))
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("POST from another origin: %d", resp.StatusCode)
	}
	if n := g.records("aep.acme.events"); n != 1 {
		t.Fatalf("records: %d, want only the allowed origin's", n)
	}

	// Same-origin pages and non-browser clients are not CORS requests.
	resp = corsDo(t, http.MethodGet, g.http.URL+"/events", map[string]string{"Origin": g.http.URL}, "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("same-origin GET: %d %v", resp.StatusCode, resp.Header)
	}
}

// BenchmarkCORS is a browser's request through the whole handler: a
// preflight and a GET /healthz from an allowed origin (docs/architecture.md,
// Libraries).
func BenchmarkCORS(b *testing.B) {
	origins, _ := ParseCORSOrigins("https://app.example.com,https://*.tools.example.com")
	g := newTestGatewayTB(b, func(c *Config) { c.CORSOrigins = origins })
	h := g.srv.Handler()
	for _, bc := range []struct {
		name, method string
		hdr          map[string]string
	}{
		{"preflight", http.MethodOptions, map[string]string{"Origin": "https://x.tools.example.com", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}},
		{"get", http.MethodGet, map[string]string{"Origin": "https://app.example.com"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			req := httptest.NewRequest(bc.method, "/healthz", nil)
			for k, v := range bc.hdr {
				req.Header.Set(k, v)
			}
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Header().Get("Access-Control-Allow-Origin") == "" {
					b.Fatalf("%s: no Access-Control-Allow-Origin: %d %v", bc.name, w.Code, w.Header())
				}
			}
		})
	}
}
