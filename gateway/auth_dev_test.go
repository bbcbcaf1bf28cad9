package gateway

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aep-gateway/aep-gateway/aep"
)

func getWithHost(t *testing.T, url, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestDevModeAnswersOnlyLoopbackHosts(t *testing.T) {
	g := newTestGateway(t, nil) // development mode
	g.srv.Mount(aep.DialectD, "/probe", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, TenantFrom(r.Context()))
	}))
	for _, host := range []string{"", "localhost", "localhost:8080", "LOCALHOST:1", "127.0.0.1:9", "127.1.2.3", "[::1]:8080", "[::1]"} {
		if st, body := getWithHost(t, g.http.URL+"/probe", host); st != http.StatusOK || body != DevTenant {
			t.Errorf("Host %q: %d %s", host, st, body)
		}
	}
	for _, host := range []string{"attacker.example", "attacker.example:8080", "localhost.attacker.example", "10.0.0.1", "0.0.0.0:8080", "[::]:80"} {
		st, body := getWithHost(t, g.http.URL+"/probe", host)
		if st != http.StatusMisdirectedRequest || !strings.Contains(body, "misdirected-request") {
			t.Errorf("Host %q: %d %s, want 421", host, st, body)
		}
	}
	if st, _ := getWithHost(t, g.http.URL+"/healthz", "pod.internal"); st != http.StatusOK {
		t.Errorf("/healthz with another Host: %d", st)
	}

	// An authenticated gateway serves any Host; so does development mode
	// opened on purpose.
	ks, _ := ParseKeyStore(strings.NewReader("acme sha256:" + sha256hex("k") + "\n"))
	for _, mutate := range []func(*Config){func(c *Config) { c.Keys = ks }, func(c *Config) { c.DevAnyHost = true }} {
		g2 := newTestGateway(t, mutate)
		if st, body := getWithHost(t, g2.http.URL+"/events", "gateway.example.com"); st != http.StatusOK {
			t.Errorf("non-dev gateway with another Host: %d %s", st, body)
		}
	}
}

func TestQueryTokenOnlyOnStreamingGETs(t *testing.T) {
	ks, err := ParseKeyStore(strings.NewReader("acme sha256:" + sha256hex("k") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGateway(t, func(c *Config) { c.Keys = ks })
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, TenantFrom(r.Context())) })
	g.srv.MountMethod(aep.DialectD, http.MethodGet, "/aep/events", echo)
	for _, p := range []string{"/stream", "/socket", "/aep", "/aep/subscriptions", "/aep/subscriptions/*"} {
		g.srv.Mount(aep.DialectD, p, echo)
	}
	for _, p := range []string{"/aep/events", "/stream", "/socket", "/aep", "/aep/subscriptions/sub_1/stream"} {
		if st, body := getWithHost(t, g.http.URL+p+"?access_token=k", ""); st != http.StatusOK || body != "acme" {
			t.Errorf("GET %s with a query token: %d %s", p, st, body)
		}
	}
	for _, p := range []string{"/aep/subscriptions", "/aep/subscriptions/sub_1", "/aep/subscriptions/a/b/stream"} {
		if st, _ := getWithHost(t, g.http.URL+p+"?access_token=k", ""); st != http.StatusUnauthorized {
			t.Errorf("GET %s with a query token: %d, want 401", p, st)
		}
	}
	if r := g.post("/events?access_token=k", "application/json", map[string]string{"AEP-Version": "0.1"}, []byte(rEvent("s", 1))); r.status != http.StatusUnauthorized {
		t.Errorf("POST /events with a query token: %d", r.status)
	}
}
