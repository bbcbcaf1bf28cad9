package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"
)

// slowRequest sends a request declaring a 1000-byte body and only its
// first byte, and reports the status answered and whether the gateway
// then closed the connection, both within wait.
func slowRequest(t *testing.T, addr, method, path, auth string, wait time.Duration) (status int, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(wait))
	if auth != "" {
		auth = "Authorization: Bearer " + auth + "\r\n"
	}
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAEP-Version: 0.1\r\n%sContent-Length: 1000\r\n\r\n{", method, path, auth)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_, err = br.ReadByte()
	return resp.StatusCode, err == io.EOF
}

// A request the gateway refuses anyway is answered and its connection
// closed without waiting for its declared body; an accepted route's slow
// body ends at the read timeout (issue 31: without a credential, no
// answer at all while the body trickled in).
func TestSlowBodyOfRefusedRequestNotDrained(t *testing.T) {
	ks, err := ParseKeyStore(strings.NewReader("acme sha256:" + sha256hex("k") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGateway(t, func(c *Config) { c.Keys, c.ReadTimeout = ks, time.Second })
	addr := strings.TrimPrefix(g.http.URL, "http://")
	for _, c := range []struct {
		method, path, auth string
		want               int
	}{
		{"POST", "/aep/events", "", http.StatusUnauthorized},
		{"POST", "/events", "", http.StatusUnauthorized},
		{"POST", "/healthz", "", http.StatusMethodNotAllowed},
		{"POST", "/nowhere", "", http.StatusNotFound},
		{"PUT", "/aep/events", "k", http.StatusMethodNotAllowed},
	} {
		start := time.Now()
		st, closed := slowRequest(t, addr, c.method, c.path, c.auth, 3*time.Second)
		if st != c.want || !closed || time.Since(start) > 500*time.Millisecond {
			t.Errorf("%s %s: %d, closed %v after %s; want %d, closed at once", c.method, c.path, st, closed, time.Since(start), c.want)
		}
	}
	start := time.Now()
	st, closed := slowRequest(t, addr, "POST", "/aep/events", "k", 5*time.Second)
	if st != http.StatusRequestTimeout || !closed {
		t.Errorf("authenticated slow body: %d, closed %v after %s; want 408 and closed at the read timeout", st, closed, time.Since(start))
	}
	// A prompt client whose request is refused keeps its connection: the
	// body that already arrived is still consumed.
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	reused := 0
	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, g.http.URL+"/aep/events", strings.NewReader(dEvent(1, "s")))
		req.Header.Set("Content-Type", "application/json")
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) {
				if i.Reused {
					reused++
				}
			},
		}))
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("prompt unauthenticated request: %d", resp.StatusCode)
		}
	}
	if reused != 2 {
		t.Errorf("a prompt client's connection was reused %d times of 2", reused)
	}
}
