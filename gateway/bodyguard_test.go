package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
)

// rawPost starts a POST on its own connection: the headers with
// Content-Length n and the first part of the body, the rest held back.
func rawPost(t *testing.T, g *testGateway, path, key string, n int, part string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(g.http.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer %s\r\nContent-Type: application/x-ndjson\r\nContent-Length: %d\r\n\r\n%s", path, key, n, part)
	return c
}

func TestSlowBodyIsCutAtReadTimeout(t *testing.T) {
	g := newTestGateway(t, func(c *Config) { c.ReadTimeout = 300 * time.Millisecond })
	c := rawPost(t, g, "/aep/events", "", 1000, "{")
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("stalled body: %d, want 408", resp.StatusCode)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("stalled body answered after %s", took)
	}
	// A body that arrives in time is untouched by the deadline, and so is
	// the connection after it.
	if r := g.post("/aep/events", "application/x-ndjson", nil, []byte(dEvent(1, "s"))); r.status != http.StatusAccepted {
		t.Fatalf("ingest after a cut body: %d %s", r.status, r.body)
	}
}

func TestInflightBytesPerTenant(t *testing.T) {
	ks, err := ParseKeyStore(strings.NewReader("acme sha256:" + sha256hex("ka") + "\nglobex sha256:" + sha256hex("kg") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	ev := dEvent(1, "s") + "\n"
	g := newTestGateway(t, func(c *Config) {
		c.Keys = ks
		c.MaxInflightBytesPerTenant = int64(2*len(ev) + 10)
	})
	// acme holds most of its budget with a body that does not finish.
	held := rawPost(t, g, "/aep/events", "ka", 2*len(ev), ev)
	waitFor(t, func() bool {
		g.srv.inflight.mu.Lock()
		defer g.srv.inflight.mu.Unlock()
		return g.srv.inflight.bytes["acme"] > 0
	})
	r := g.post("/aep/events", "application/x-ndjson", map[string]string{"Authorization": "Bearer ka"}, []byte(ev))
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" || r.json(t)["error"].(map[string]any)["code"] != "protocol_error" {
		t.Fatalf("acme over its in-flight bytes: %d %s", r.status, r.body)
	}
	r = g.post("/events", "application/x-ndjson", map[string]string{"Authorization": "Bearer ka", "AEP-Version": "0.1"}, []byte(rEvent("s", 1)+"\n"))
	if r.status != http.StatusTooManyRequests || r.json(t)["error"] != "limit-exceeded" {
		t.Fatalf("acme over its in-flight bytes (R): %d %s", r.status, r.body)
	}
	// Another tenant is not affected.
	if r := g.post("/aep/events", "application/x-ndjson", map[string]string{"Authorization": "Bearer kg"}, []byte(ev)); r.status != http.StatusAccepted {
		t.Fatalf("globex: %d %s", r.status, r.body)
	}
	// Once the held request is answered, its bytes are given back.
	_, _ = held.Write([]byte(ev))
	resp, err := http.ReadResponse(bufio.NewReader(held), nil)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("held request: %v %v", resp, err)
	}
	resp.Body.Close()
	waitFor(t, func() bool {
		g.srv.inflight.mu.Lock()
		defer g.srv.inflight.mu.Unlock()
		return len(g.srv.inflight.bytes) == 0
	})
	if r := g.post("/aep/events", "application/x-ndjson", map[string]string{"Authorization": "Bearer ka"}, []byte(ev)); r.status != http.StatusAccepted {
		t.Fatalf("acme after its bytes were released: %d %s", r.status, r.body)
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A mounted route's body (a subscription request, an ack batch) is held to
// the read timeout too; streams (GET) are not.
func TestMountedBodyReadDeadline(t *testing.T) {
	g := newTestGateway(t, func(c *Config) { c.ReadTimeout = 300 * time.Millisecond })
	g.srv.Mount(aep.DialectD, "/probe", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			time.Sleep(500 * time.Millisecond) // longer than the read timeout
			fmt.Fprint(w, "stream")
			return
		}
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	c := rawPost(t, g, "/probe", "", 100, "{")
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("stalled body on a mounted route: %v %v", resp, err)
	}
	resp.Body.Close()
	if st, body := getWithHost(t, g.http.URL+"/probe", ""); st != http.StatusOK || body != "stream" {
		t.Fatalf("GET outliving the read timeout: %d %s", st, body)
	}
	if r := g.post("/probe", "application/json", nil, []byte("{}")); r.status != http.StatusOK {
		t.Fatalf("a body in time: %d %s", r.status, r.body)
	}
}
