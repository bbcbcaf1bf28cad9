package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// clientFrom is an HTTP client whose connections come from local address
// src (any of 127.0.0.0/8 on Linux), so that the gateway counts it as
// another client address.
func clientFrom(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}}
}

// idleHealthz opens a connection, asks GET /healthz with keep-alive and
// leaves the connection open, idle. It reports the status answered (503
// for a connection refused over a cap; 0 when closed without an answer).
func idleHealthz(addr string) (net.Conn, int) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, 0
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return c, 0
	}
	resp.Body.Close()
	return c, resp.StatusCode
}

// A hostile client holds idle connections and floods the embedded broker
// with connections until the process runs out of descriptors. The
// gateway refuses it past its per-address cap with a 503, another client
// ingests throughout, /readyz says when the broker cannot take new
// connections, and once the flood is gone the embedded broker accepts
// connections again (kfake's own accept loop would have returned for
// good on the first EMFILE).
func TestHostileIdleConnectionsAndDescriptorExhaustion(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("prlimit not available")
	}
	const nofile, perIP, idle = 512, 100, 150
	g := startGatewayUnder(t, []string{"prlimit", fmt.Sprintf("--nofile=%d:%d", nofile, nofile), "--"},
		"--data-dir", t.TempDir(), "--embedded-kafka-listen", "127.0.0.1:0", "--topic-partitions", "2",
		"--max-connections", "400", "--max-connections-per-ip", fmt.Sprint(perIP))
	http.DefaultClient.CloseIdleConnections()
	addr := strings.TrimPrefix(g.URL, "http://")
	other := clientFrom("127.0.0.2")
	ingest := func(i int) (int, error) {
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/aep/events", strings.NewReader(dEvent(i, "other")))
		req.Header.Set("Content-Type", "application/json")
		resp, err := other.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body) // a drained body keeps the connection for reuse
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if st, err := ingest(0); st != http.StatusAccepted {
		t.Fatalf("ingest before the flood: %d %v", st, err)
	}

	// 1. Idle keep-alive connections from one address: the cap holds.
	served, refused := 0, 0
	for range idle {
		c, st := idleHealthz(addr)
		if c != nil {
			defer c.Close()
		}
		switch st {
		case http.StatusOK:
			served++
		case http.StatusServiceUnavailable:
			refused++
		}
	}
	t.Logf("idle connections from one address: %d served, %d refused with 503 (cap %d)", served, refused, perIP)
	if served > perIP || refused < idle-perIP || served+refused != idle {
		t.Fatalf("per-address cap: %d served, %d refused of %d", served, refused, idle)
	}
	if st, err := ingest(1); st != http.StatusAccepted {
		t.Fatalf("another client's ingest during the idle flood: %d %v", st, err)
	}

	// 2. Connections to the embedded broker until the process is out of
	// descriptors.
	var flood []net.Conn
	for range nofile {
		c, err := net.DialTimeout("tcp", g.KafkaAddr, time.Second)
		if err != nil {
			break
		}
		flood = append(flood, c)
	}
	t.Logf("opened %d connections to the embedded broker (process limit %d descriptors)", len(flood), nofile)
	if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", g.cmd.Process.Pid)); err == nil {
		t.Logf("the gateway holds %d descriptors", len(fds))
	}
	readyz := func() int {
		resp, err := other.Get(g.URL + "/readyz")
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	notReady := false
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline) && !notReady; time.Sleep(100 * time.Millisecond) {
		notReady = readyz() == http.StatusServiceUnavailable
	}
	if !notReady {
		t.Fatal("/readyz kept answering ready while the embedded broker could not take connections")
	}
	for _, c := range flood {
		c.Close()
	}

	// 3. After the flood: the broker accepts and answers, the gateway is
	// ready, and the other client ingests.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(g.KafkaAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("embedded broker after the flood: %v", err)
	}
	ready := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !ready; time.Sleep(100 * time.Millisecond) {
		ready = readyz() == http.StatusOK
	}
	if !ready {
		t.Fatal("/readyz did not come back after the flood")
	}
	if st, err := ingest(2); st != http.StatusAccepted {
		t.Fatalf("ingest after the flood: %d %v", st, err)
	}
}
