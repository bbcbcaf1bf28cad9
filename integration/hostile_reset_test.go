package integration

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// resetClients is how many clients reset their connection in each case
// (issue 31's figure).
const resetClients = 100

// goroutineMargin is how far above its value before the gateway's
// goroutine count may settle after the clients reset: what the runtime
// and the Kafka clients start and stop on their own.
const goroutineMargin = 8

// dialRST connects to addr with a small receive buffer (so that a stream
// the client does not read fills the socket and the gateway's writes
// block) and SO_LINGER 0, so that Close resets the connection (TCP RST).
func dialRST(addr string) (*net.TCPConn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	if err := tc.SetLinger(0); err != nil {
		tc.Close()
		return nil, err
	}
	return tc, nil
}

// midBody sends a request declaring a body of 64 KiB and the part of it
// in partial, and returns the connection (Close resets it).
func midBody(addr, path, ctype, partial string, hdr map[string]string) (*net.TCPConn, error) {
	c, err := dialRST(addr)
	if err != nil {
		return nil, err
	}
	var h strings.Builder
	for k, v := range hdr {
		fmt.Fprintf(&h, "%s: %s\r\n", k, v)
	}
	_, err = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\n%sContent-Length: %d\r\n\r\n%s",
		path, addr, ctype, h.String(), 64<<10, partial)
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// openRaw sends a GET for path and reads the response's head, returning
// the connection and its reader for what follows.
func openRaw(addr, path string, hdr map[string]string) (*net.TCPConn, *bufio.Reader, *http.Response, error) {
	c, err := dialRST(addr)
	if err != nil {
		return nil, nil, nil, err
	}
	var h strings.Builder
	for k, v := range hdr {
		fmt.Fprintf(&h, "%s: %s\r\n", k, v)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", path, addr, h.String()); err != nil {
		c.Close()
		return nil, nil, nil, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		c.Close()
		return nil, nil, nil, err
	}
	return c, br, resp, nil
}

// maskedFrame is a client's text frame header declaring n payload bytes
// (RFC 6455 §5.2), then the first len(payload) of them, masked.
func maskedFrame(n int, payload []byte) []byte {
	b := []byte{0x81}
	switch {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n < 1<<16:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	key := []byte{1, 2, 3, 4}
	b = append(b, key...)
	for i, c := range payload {
		b = append(b, c^key[i%4])
	}
	return b
}

// midFrame opens a WebSocket on path (subprotocol sub, if any), sends
// first as a whole message, then the header of a 64 KiB frame and part of
// it, and returns the connection (Close resets it).
func midFrame(addr, path, sub, first string) (*net.TCPConn, error) {
	k := make([]byte, 16)
	_, _ = rand.Read(k)
	hdr := map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": base64.StdEncoding.EncodeToString(k)}
	if sub != "" {
		hdr["Sec-WebSocket-Protocol"] = sub
	}
	c, _, resp, err := openRaw(addr, path, hdr)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		c.Close()
		return nil, fmt.Errorf("upgrade %s: %d", path, resp.StatusCode)
	}
	if _, err := c.Write(maskedFrame(len(first), []byte(first))); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := c.Write(maskedFrame(64<<10, []byte(`{"type":"`+strings.Repeat("x", 1000)))); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// goroutines reads the gateway's goroutine count from its profiler (the
// go_goroutines of /metrics may be a cached scrape).
func goroutines(t *testing.T, g *gatewayProc) int {
	t.Helper()
	resp, err := http.Get(g.AdminURL + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var n int
	if _, err := fmt.Fscanf(resp.Body, "goroutine profile: total %d", &n); err != nil {
		t.Fatalf("goroutine profile: %v", err)
	}
	return n
}

// settledGoroutines waits for the count to stay put for two seconds.
func settledGoroutines(t *testing.T, g *gatewayProc) int {
	t.Helper()
	prev := goroutines(t, g)
	for range 15 {
		time.Sleep(2 * time.Second)
		n := goroutines(t, g)
		if n == prev {
			return n
		}
		prev = n
	}
	return prev
}

// 100 clients reset their connection (SO_LINGER 0, TCP RST) in the middle
// of a request body (single JSON and NDJSON, both dialects), of an SSE
// stream being written to (both dialects) and of a WebSocket frame (both
// dialects); after each case the gateway's goroutines return to within
// goroutineMargin of their count before it (issue 31: 86 -> 104, "not
// confirmed to return"). On failure the goroutine dump is in the log.
func TestHostileResetsMidWriteLeaveNoGoroutines(t *testing.T) {
	dir := t.TempDir()
	g := startGateway(t, "--data-dir", filepath.Join(dir, "data"), "--embedded-kafka-listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0", "--max-connections-per-ip", "0", "--max-streams-per-tenant", "0")
	addr := strings.TrimPrefix(g.URL, "http://")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rHdr := map[string]string{"AEP-Version": "0.1"}
	published := 0 // ids and R's seq go on: a repeated one is a duplicate, not delivered
	publish := func(n int) {
		t.Helper()
		pad := strings.Repeat("p", 16<<10)
		var d, r strings.Builder
		for i := published; i < published+n; i++ {
			fmt.Fprintf(&d, `{"aep_version":"0.1","id":"evt_rst_%06d","type":"task.progress","source":"agent:rst","session_id":"s_rst","created_at":"2026-07-09T10:00:00Z","payload":{"pad":%q}}`+"\n", i, pad)
			fmt.Fprintf(&r, `{"aep":"0.1","id":"01JX9YB0RST%06d","type":"tool.requested","time":"2026-07-03T10:14:00.000Z","source":"aep://host-a/agent/claude-code/session/s_rst","agent":"claude-code","session":"s_rst","seq":%d,"epoch":0,"subject":"Bash","data":{"pad":%q}}`+"\n", i, i, pad)
		}
		if res, err := g.post(ctx, "/aep/events", "application/x-ndjson", nil, d.String()); err != nil || res.status != http.StatusAccepted {
			t.Fatalf("publish D: %v %+v", err, res)
		}
		if res, err := g.post(ctx, "/events", "application/x-ndjson", rHdr, r.String()); err != nil || res.status != http.StatusAccepted {
			t.Fatalf("publish R: %v %+v", err, res)
		}
		published += n
	}
	// Warm: each dialect's topic, producer and live reader exist before
	// the count is taken.
	publish(1)
	for _, p := range []string{"/aep/events?types=*", "/stream?filter=" + url.QueryEscape(`{"session":"s_rst"}`)} {
		c, err := openStream(addr, p)
		if err != nil {
			t.Fatalf("warm %s: %v", p, err)
		}
		c.Close()
	}
	http.DefaultClient.CloseIdleConnections()

	dEv := dEvent(0, "s_rst")
	rEv := rEvent("srst", 1)
	rStream := "/stream?filter=" + url.QueryEscape(`{"session":"s_rst"}`)
	cases := []struct {
		name   string
		open   func() (*net.TCPConn, error) // one client's connection, left mid-write
		stream bool                         // the gateway writes to it: publish, and see it arrive
	}{
		{name: "D single JSON body", open: func() (*net.TCPConn, error) {
			return midBody(addr, "/aep/events", "application/json", dEv[:len(dEv)/2], nil)
		}},
		{name: "D NDJSON body", open: func() (*net.TCPConn, error) {
			return midBody(addr, "/aep/events", "application/x-ndjson", dEv+"\n"+dEv+"\n"+dEv[:len(dEv)/2], nil)
		}},
		{name: "R single JSON body", open: func() (*net.TCPConn, error) {
			return midBody(addr, "/events", "application/json", rEv[:len(rEv)/2], rHdr)
		}},
		{name: "R NDJSON body", open: func() (*net.TCPConn, error) {
			return midBody(addr, "/events", "application/x-ndjson", rEvent("srst", 2)+"\n"+rEv[:len(rEv)/2], rHdr)
		}},
		{name: "D SSE stream being written", stream: true, open: func() (*net.TCPConn, error) {
			return openStream(addr, "/aep/events?types=*")
		}},
		{name: "R SSE stream being written", stream: true, open: func() (*net.TCPConn, error) {
			return openStream(addr, rStream)
		}},
		{name: "D WebSocket mid-frame", open: func() (*net.TCPConn, error) {
			return midFrame(addr, "/aep", "aep-0.1", gatewaytest.DControl("evt_open", "session.opened", `{"session_id":"sess_rst","version":"0.1"}`))
		}},
		{name: "R WebSocket mid-frame", open: func() (*net.TCPConn, error) {
			return midFrame(addr, "/socket", "", `{"type":"hello","versions":["0.1"],"role":"consumer","identity":{"agent":"it"}}`)
		}},
	}
	for _, tc := range cases {
		before := settledGoroutines(t, g)
		conns := make([]*net.TCPConn, resetClients)
		errs := make([]error, resetClients)
		var wg sync.WaitGroup
		for i := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				conns[i], errs[i] = tc.open()
			}()
		}
		wg.Wait()
		time.Sleep(500 * time.Millisecond) // the gateway reads what it has
		during := goroutines(t, g)         // a goroutine each
		if tc.stream {
			// Enough that every stream's socket fills: the gateway's
			// writes are blocked when the clients reset, well within its
			// write timeout (10 s), after which it would end them itself.
			publish(64)
			var rg sync.WaitGroup
			for i, c := range conns {
				if c != nil {
					rg.Add(1)
					go func() {
						defer rg.Done()
						_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
						if _, err := io.ReadFull(c, make([]byte, 1024)); err != nil {
							errs[i] = fmt.Errorf("the stream's events: %w", err)
						}
					}()
				}
			}
			rg.Wait()
			// Parked streams hold no goroutine (transport/sse_park.go):
			// the count now is of the ones writing.
			during = goroutines(t, g)
		}
		for _, c := range conns {
			if c != nil {
				c.Close() // SO_LINGER 0: a reset
			}
		}
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		after := settledGoroutines(t, g)
		for deadline := time.Now().Add(90 * time.Second); after > before+goroutineMargin && time.Now().Before(deadline); {
			time.Sleep(2 * time.Second)
			after = goroutines(t, g)
		}
		t.Logf("%s: %d clients reset; goroutines %d before, %d with them connected, %d after", tc.name, resetClients, before, during, after)
		// most of them (a client or two may be answered and gone already,
		// and the count moves by itself by a few: CI saw 99 of 100)
		if !tc.stream && during < before+resetClients*9/10 {
			t.Errorf("%s: %d goroutines with %d clients connected, %d before: the clients were not served", tc.name, during, resetClients, before)
		}
		if after > before+goroutineMargin {
			t.Errorf("%s: goroutines %d after 90 s, %d before (margin %d)", tc.name, after, before, goroutineMargin)
			dumpGoroutines(t, g)
			return
		}
	}
}

// openStream opens an SSE stream of every event and returns its
// connection, its head read and its body not.
func openStream(addr, path string) (*net.TCPConn, error) {
	c, br, resp, err := openRaw(addr, path, map[string]string{"Accept": "text/event-stream", "AEP-Version": "0.1"})
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("%s: %d", path, resp.StatusCode)
	}
	if br.Buffered() > 0 { // what the reader took of the body: the test reads the connection
		_, _ = br.Discard(br.Buffered())
	}
	return c, nil
}

// dumpGoroutines writes the gateway's goroutine dump (debug=2) to a file
// and its path to the log.
func dumpGoroutines(t *testing.T, g *gatewayProc) {
	t.Helper()
	resp, err := http.Get(g.AdminURL + "/debug/pprof/goroutine?debug=2")
	if err != nil {
		t.Log(err)
		return
	}
	defer resp.Body.Close()
	f, err := os.CreateTemp("", "aep-goroutines-*.txt")
	if err != nil {
		t.Log(err)
		return
	}
	defer f.Close()
	_, _ = io.Copy(f, resp.Body)
	t.Logf("goroutine dump: %s", f.Name())
}
