package integration

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// With --admin-listen, /metrics and /readyz's details (tenant names,
// subscription ids, the broker's address) leave the public listener for
// the admin one, which also serves Go's profiler; the public /readyz
// answers the status alone, /healthz answers on both (issue 24).
func TestAdminListenerKeepsOperatorRoutesOffThePublicOne(t *testing.T) {
	dir := t.TempDir()
	g := startGateway(t, "--data-dir", filepath.Join(dir, "data"), "--embedded-kafka-listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0")
	if g.AdminURL == "" || g.AdminURL == g.URL {
		t.Fatalf("admin URL %q (public %q)", g.AdminURL, g.URL)
	}
	get := func(base, path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	for _, p := range []string{"/metrics", "/debug/pprof/"} {
		if st, _ := get(g.URL, p); st == http.StatusOK {
			t.Errorf("public %s: %d, want it gone", p, st)
		}
	}
	if st, body := get(g.AdminURL, "/metrics"); st != http.StatusOK || !strings.Contains(body, "aep_connections_open") {
		t.Errorf("admin /metrics: %d", st)
	}
	if st, body := get(g.AdminURL, "/readyz"); st != http.StatusOK || !strings.Contains(body, `"status":"ready"`) {
		t.Errorf("admin /readyz: %d %s", st, body)
	}
	if st, body := get(g.URL, "/readyz"); st != http.StatusOK || strings.TrimSpace(body) != `{"status":"ready"}` {
		t.Errorf("public /readyz: %d %s, want the status alone", st, body)
	}
	if st, body := get(g.AdminURL, "/debug/pprof/"); st != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("admin pprof: %d", st)
	}
	for _, base := range []string{g.URL, g.AdminURL} {
		if st, _ := get(base, "/healthz"); st != http.StatusOK {
			t.Errorf("%s/healthz: %d", base, st)
		}
	}
	g.stop()
}
