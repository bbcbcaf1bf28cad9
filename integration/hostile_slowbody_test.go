package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slowBody opens a connection from local address src, sends a request
// for path declaring a 1000-byte body and only its first byte, then waits
// up to wait for the gateway to answer or close. It reports the status
// answered (0: closed without an answer, -1: still open at the end) and
// how long that took.
//
// Like an attacker, it dials again when refused over a connection cap,
// until the gateway takes the connection.
func slowBody(addr, src, path, auth string, wait time.Duration) (int, time.Duration) {
	for deadline := time.Now().Add(wait); ; {
		st, took := slowBodyOnce(addr, src, path, auth, wait)
		if st != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return st, took
		}
	}
}

func slowBodyOnce(addr, src, path, auth string, wait time.Duration) (int, time.Duration) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return 0, 0
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetDeadline(start.Add(wait))
	hdr := ""
	if auth != "" {
		hdr = "Authorization: Bearer " + auth + "\r\n"
	}
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAEP-Version: 0.1\r\n%sContent-Length: 1000\r\n\r\n{", path, addr, hdr)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return -1, time.Since(start)
		}
		return 0, time.Since(start)
	}
	resp.Body.Close()
	took := time.Since(start)
	// Answered: the connection must also be closed, not left waiting
	// for the rest of the body.
	if _, err := io.Copy(io.Discard, br); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return -1, time.Since(start)
		}
	}
	return resp.StatusCode, took
}

// 300 clients from 3 addresses send requests declaring a 1000-byte body
// and then stall (issue 31: before, no answer for 90 s, and the victim
// got 503 max-connections for 86 s): requests the gateway refuses anyway
// (no credential, a route that takes no body, an unknown route) are
// answered and closed at once, authenticated ones within --read-timeout,
// and another address ingests throughout without a 503.
func TestHostileSlowBodiesFromThreeAddresses(t *testing.T) {
	const readTimeout = 2 * time.Second
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte(keyFileLine("acme", "k-acme")), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "--data-dir", dir, "--embedded-kafka-listen", "127.0.0.1:0", "--api-keys", keys,
		"--max-connections", "300", "--max-connections-per-ip", "100", "--read-timeout", readTimeout.String())
	http.DefaultClient.CloseIdleConnections()
	addr := strings.TrimPrefix(g.URL, "http://")

	// The victim opens a new connection for every request, so that every
	// one of them passes the connection caps.
	vd := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
	victim := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: vd.DialContext, DisableKeepAlives: true}}
	var vOK, v503, vOther atomic.Int64
	ingest := func(i int) {
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/aep/events", strings.NewReader(dEvent(i, "victim")))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer k-acme")
		resp, err := victim.Do(req)
		if err != nil {
			vOther.Add(1)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusAccepted:
			vOK.Add(1)
		case http.StatusServiceUnavailable:
			v503.Add(1)
		default:
			vOther.Add(1)
		}
	}
	ingest(0)
	if vOK.Load() != 1 {
		t.Fatalf("victim's ingest before the attack: ok %d, 503 %d, other %d", vOK.Load(), v503.Load(), vOther.Load())
	}

	// The attack: 100 connections from each of 3 addresses, 10 of each
	// hundred authenticated (those must wait for the read timeout).
	paths := []string{"/healthz", "/events", "/aep/events", "/no-such-route"}
	wait := readTimeout + 3*time.Second // shorter than the 5 s between bytes of the original attack
	type result struct {
		status int
		took   time.Duration
		auth   bool
		path   string
	}
	results := make([]result, 300)
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src := fmt.Sprintf("127.0.0.%d", 3+i%3)
			auth, path := "", paths[i%len(paths)]
			if i%10 == 0 {
				auth, path = "k-acme", paths[1+i/10%2] // ingest, dialect R or D
			}
			st, took := slowBody(addr, src, path, auth, wait)
			results[i] = result{st, took, auth != "", path}
		}()
	}
	// The victim ingests every 20 ms while the attack runs.
	ctx, cancel := context.WithCancel(context.Background())
	vdone := make(chan struct{})
	go func() {
		defer close(vdone)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 1; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				ingest(i)
			}
		}
	}()
	wg.Wait()
	cancel()
	<-vdone

	answered := map[int]int{}
	var slowestRefused, slowestAuth time.Duration
	open := 0
	for _, r := range results {
		answered[r.status]++
		if r.status == -1 {
			open++
			t.Logf("still open: %s (authenticated %v)", r.path, r.auth)
			continue
		}
		if r.auth {
			slowestAuth = max(slowestAuth, r.took)
		} else {
			slowestRefused = max(slowestRefused, r.took)
		}
	}
	t.Logf("300 slow bodies from 3 addresses (read timeout %s): by status %v (0: closed unanswered, -1: still open after %s); slowest refused %s, slowest authenticated %s",
		readTimeout, answered, wait, slowestRefused.Round(time.Millisecond), slowestAuth.Round(time.Millisecond))
	t.Logf("victim during the attack: %d accepted, %d refused 503, %d other", vOK.Load(), v503.Load(), vOther.Load())
	if open > 0 {
		t.Errorf("%d slow-body connections neither answered nor closed within %s", open, wait)
	}
	if slowestRefused > time.Second {
		t.Errorf("a request refused anyway took %s to be answered (want at once, without reading the body)", slowestRefused)
	}
	if slowestAuth > readTimeout+time.Second {
		t.Errorf("an authenticated slow body took %s (read timeout %s)", slowestAuth, readTimeout)
	}
	if answered[http.StatusRequestTimeout] != 30 {
		t.Errorf("authenticated slow bodies answered 408: %d of 30", answered[http.StatusRequestTimeout])
	}
	if v503.Load() > 0 || vOK.Load() < 2 {
		t.Errorf("victim: %d accepted, %d refused 503 during the attack", vOK.Load(), v503.Load())
	}
}
