package integration

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// BenchmarkIdleStreams measures what idle streams cost the gateway process,
// not the client: the built binary (embedded broker) serves N idle streams
// opened by this process over real sockets, and the gateway's VmRSS is read
// from /proc before and after they open (rss-KB/conn), and every 5 ms while
// all N close at once (storm-spike-%: the highest RSS during the storm over
// the RSS just before it). AEP_IDLE_CONNS sets N (default 10000; the
// descriptor limit of both processes must allow it); AEP_GATEWAY_BIN runs
// another binary (a baseline). AEP_IDLE_PROFILE=DIR also starts the
// gateway with an admin listener and, with the N streams open, saves its
// heap profile (after a GC), goroutine counts and Go runtime metrics into
// DIR as KIND-heap.pb.gz, KIND-goroutine.txt and KIND-metrics.txt. One
// iteration is one whole measurement, so run it with -benchtime 1x:
//
//	go test -run '^$' -bench IdleStreams -benchtime 1x ./integration/
func BenchmarkIdleStreams(b *testing.B) {
	n := 10000
	if s := os.Getenv("AEP_IDLE_CONNS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n <= 0 {
			b.Fatalf("AEP_IDLE_CONNS=%q", s)
		}
	}
	for _, kind := range []string{"sse-d", "sse-d-tls", "ws-d", "ws-r", "sse-r", "floor-sse"} {
		b.Run(kind, func(b *testing.B) {
			for range b.N {
				measureIdle(b, kind, n)
			}
		})
	}
}

// idleServer is a process serving idle streams: its address and pid.
type idleServer struct {
	host  string
	admin string // the admin listener's URL, when started with one
	pid   int
	logs  func() string
	stop  func()
}

// startIdleServer starts the gateway binary, or for floor-sse this test
// binary as a plain net/http server (TestIdleFloorServer).
func startIdleServer(b *testing.B, kind string) idleServer {
	if kind == "floor-sse" {
		return startFloorServer(b)
	}
	args := []string{"--data-dir", b.TempDir(), "--embedded-kafka-listen", "127.0.0.1:0", "--topic-partitions", "3",
		"--max-streams-per-tenant", "0", "--max-connections", "0", "--max-connections-per-ip", "0"}
	if strings.HasSuffix(kind, "-tls") {
		// HTTPS: readiness is asked on the plain admin listener
		dir := b.TempDir()
		cert, key := newTestCA(b).issue(b, "gateway", 2, true)
		for name, v := range map[string][]byte{"tls.crt": cert, "tls.key": key} {
			if err := os.WriteFile(dir+"/"+name, v, 0o600); err != nil {
				b.Fatal(err)
			}
		}
		args = append(args, "--tls-cert-file", dir+"/tls.crt", "--tls-key-file", dir+"/tls.key", "--admin-listen", "127.0.0.1:0")
	} else if os.Getenv("AEP_IDLE_PROFILE") != "" {
		args = append(args, "--admin-listen", "127.0.0.1:0") // pprof is served there only
	}
	g := startGatewayUnder(b, nil, args...)
	u, err := url.Parse(g.URL)
	if err != nil {
		b.Fatal(err)
	}
	return idleServer{host: u.Host, admin: g.AdminURL, pid: g.cmd.Process.Pid, logs: g.logs.String, stop: g.kill}
}

// startFloorServer runs TestIdleFloorServer in a child process.
func startFloorServer(b *testing.B) idleServer {
	cmd := exec.Command(os.Args[0], "-test.run", "^TestIdleFloorServer$")
	cmd.Env = append(os.Environ(), "AEP_IDLE_FLOOR_SERVER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	b.Cleanup(stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("floor server: %v", err)
	}
	return idleServer{host: strings.TrimSpace(line), pid: cmd.Process.Pid, logs: func() string { return "" }, stop: stop}
}

// TestIdleFloorServer is net/http's floor for BenchmarkIdleStreams: when
// run by it (AEP_IDLE_FLOOR_SERVER=1), a plain http.Server whose handler
// only opens an event stream (transport.StartSSE, the same first comment)
// and waits for the client to leave. It prints its address and serves
// until killed.
func TestIdleFloorServer(t *testing.T) {
	if os.Getenv("AEP_IDLE_FLOOR_SERVER") != "1" {
		t.Skip("run by BenchmarkIdleStreams/floor-sse")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		transport.StartSSE(w)
		_, _ = io.WriteString(w, ": stream open\n\n")
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}), ReadHeaderTimeout: 10 * time.Second}
	fmt.Println(ln.Addr().String())
	_ = srv.Serve(ln)
}

// idleDialer opens one idle stream of a kind on a gateway.
type idleDialer func(addr string) (net.Conn, error)

var idleDialers = map[string]idleDialer{
	"sse-d": func(addr string) (net.Conn, error) {
		return dialSSE(addr, "/aep/events?types=idle.*", ": stream open\n\n")
	},
	// TLS (HTTP/1.1): a TLS connection is never parked (the poller watches
	// a descriptor, and TLS keeps buffered records above it), so this is
	// the goroutine path's cost plus TLS's buffers.
	"sse-d-tls": func(addr string) (net.Conn, error) {
		return dialSSEOver(func() (net.Conn, error) {
			d := &net.Dialer{Timeout: 30 * time.Second}
			return tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}) //nolint:gosec // a benchmark against its own throwaway certificate
		}, addr, "/aep/events?types=idle.*", ": stream open\n\n")
	},
	"sse-r": func(addr string) (net.Conn, error) {
		return dialSSE(addr, "/stream", ": stream open\n\n")
	},
	"ws-d": dialIdleWSD,
	"ws-r": dialIdleWSR,
	"floor-sse": func(addr string) (net.Conn, error) {
		return dialSSE(addr, "/", ": stream open\n\n")
	},
}

func measureIdle(b *testing.B, kind string, n int) {
	b.StopTimer()
	srv := startIdleServer(b, kind)
	defer srv.stop()
	dial := idleDialers[kind]
	// One stream first: the tenant's topic and tail exist before the
	// baseline is read, so the figure is what each further stream adds.
	first, err := dial(srv.host)
	if err != nil {
		b.Fatalf("first stream: %v\n%s", err, srv.logs())
	}
	defer first.Close()
	pid := srv.pid
	before := settledRSS(b, pid)
	conns := make([]net.Conn, n)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	next := make(chan int, 64)
	for range 32 {
		wg.Go(func() {
			for i := range next {
				c, err := dial(srv.host)
				if err != nil {
					select {
					case errs <- fmt.Errorf("stream %d: %w", i, err):
					default:
					}
					continue
				}
				conns[i] = c
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatalf("%v\n%s", err, tail(srv.logs(), 4000))
	default:
	}
	opened := time.Since(start)
	open := settledRSS(b, pid)
	perConn := float64(open-before) / float64(n)
	if dir := os.Getenv("AEP_IDLE_PROFILE"); dir != "" && srv.admin != "" {
		saveIdleProfile(b, dir, kind, srv.admin)
	}

	// The storm: every stream closes at once; sample the gateway's RSS
	// until it has been quiet for a second after the last close.
	peak := open
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				if r := rss(pid); r > peak {
					peak = r
				}
			}
		}
	}()
	var cw sync.WaitGroup
	for part := range 8 {
		cw.Go(func() {
			for i := part; i < n; i += 8 {
				conns[i].Close()
			}
		})
	}
	cw.Wait()
	time.Sleep(3 * time.Second)
	close(stop)
	<-sampled
	after := rss(pid)
	b.ReportMetric(perConn/1024, "rss-KB/conn")
	b.ReportMetric(100*float64(peak-open)/float64(open), "storm-spike-%")
	b.ReportMetric(float64(open)/(1<<20), "rss-open-MB")
	b.Logf("%s: %d streams opened in %v; gateway RSS %.1f MB before, %.1f MB open (%.2f KB/conn), peak %.1f MB during the close storm, %.1f MB 3 s after; load %s",
		kind, n, opened.Round(time.Millisecond), mb(before), mb(open), perConn/1024, mb(peak), mb(after), loadAvg())
}

func mb(v int64) float64 { return float64(v) / (1 << 20) }

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// rss is the VmRSS of process pid in bytes, 0 when unreadable.
func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// settledRSS waits until the RSS of pid has moved less than 1% over a
// second (at most 20 s) and returns it.
func settledRSS(b *testing.B, pid int) int64 {
	prev := rss(pid)
	for range 20 {
		time.Sleep(time.Second)
		cur := rss(pid)
		if d := cur - prev; d < prev/100 && -d < prev/100 {
			return cur
		}
		prev = cur
	}
	return prev
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// dialSSE opens GET path and reads the response up to and including the
// first occurrence of until after the headers.
func dialSSE(addr, path, until string) (net.Conn, error) {
	return dialSSEOver(func() (net.Conn, error) { return net.DialTimeout("tcp", addr, 30*time.Second) }, addr, path, until)
}

// dialSSEOver is dialSSE on a connection dial makes.
func dialSSEOver(dial func() (net.Conn, error), addr, path, until string) (net.Conn, error) {
	c, err := dial()
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", path, addr); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(c, 1024)
	var got []byte
	for !bytes.Contains(got, []byte("\r\n\r\n")) || !bytes.Contains(got[bytes.Index(got, []byte("\r\n\r\n"))+4:], []byte(until)) {
		line, err := br.ReadSlice('\n')
		got = append(got, line...)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("%w after %q", err, got)
		}
		if len(got) > 8192 {
			c.Close()
			return nil, fmt.Errorf("no %q in %q", until, got)
		}
	}
	if !bytes.HasPrefix(got, []byte("HTTP/1.1 200")) {
		c.Close()
		return nil, fmt.Errorf("answer %q", got)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// dialIdleWSD opens a dialect D WebSocket by hand (no client library, so
// that the client costs little): session.opened, one best_effort
// subscription, and waits for subscription.created.
func dialIdleWSD(addr string) (net.Conn, error) {
	c, br, err := idleUpgrade(addr, "/aep", "Sec-WebSocket-Protocol: aep-0.1\r\n")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (net.Conn, error) { c.Close(); return nil, err }
	send := func(s string) error { _, err := c.Write(wsClientFrame([]byte(s))); return err }
	if err := send(`{"aep_version":"0.1","id":"evt_idle_open","type":"session.opened","source":"agent:idle","target":"harness:aep","created_at":"2026-07-09T10:00:00Z","payload":{"session_id":"sess_idle","version":"0.1"}}`); err != nil {
		return fail(err)
	}
	if err := wsExpect(br, "session.ready"); err != nil {
		return fail(err)
	}
	if err := send(`{"aep_version":"0.1","id":"evt_idle_sub","type":"subscription.requested","source":"agent:idle","target":"harness:aep","created_at":"2026-07-09T10:00:00Z","payload":{"types":["idle.*"]}}`); err != nil {
		return fail(err)
	}
	if err := wsExpect(br, "subscription.created"); err != nil {
		return fail(err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// wsClientFrame is a masked text frame (mask zero: the payload is sent as
// is, which RFC 6455 allows).
func wsClientFrame(p []byte) []byte {
	h := []byte{0x81}
	switch {
	case len(p) < 126:
		h = append(h, 0x80|byte(len(p)))
	case len(p) < 1<<16:
		h = append(h, 0x80|126, byte(len(p)>>8), byte(len(p)))
	default:
		h = append(h, 0x80|127)
		h = binary.BigEndian.AppendUint64(h, uint64(len(p)))
	}
	return append(append(h, 0, 0, 0, 0), p...)
}

// wsExpect reads server frames until a text frame that contains the type
// want.
func wsExpect(br *bufio.Reader, want string) error {
	for range 8 {
		p, err := wsReadFrame(br)
		if err != nil {
			return err
		}
		if bytes.Contains(p, []byte(`"type":"`+want+`"`)) {
			return nil
		}
	}
	return fmt.Errorf("no %s", want)
}

// wsReadFrame reads one unmasked server frame; a text frame's payload, nil
// for any other opcode.
func wsReadFrame(br *bufio.Reader) ([]byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return nil, err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		if _, err := io.ReadFull(br, l[:]); err != nil {
			return nil, err
		}
		n = uint64(binary.BigEndian.Uint16(l[:]))
	case 127:
		var l [8]byte
		if _, err := io.ReadFull(br, l[:]); err != nil {
			return nil, err
		}
		n = binary.BigEndian.Uint64(l[:])
	}
	if n > 1<<20 {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(br, p); err != nil {
		return nil, err
	}
	if h[0]&0x0f != 1 {
		return nil, nil
	}
	return p, nil
}

// saveIdleProfile saves the gateway's heap profile (after a GC), its
// goroutines grouped by stack and its Go runtime metrics into dir.
func saveIdleProfile(b *testing.B, dir, kind, admin string) {
	for name, path := range map[string]string{
		"heap.pb.gz":    "/debug/pprof/heap?gc=1",
		"goroutine.txt": "/debug/pprof/goroutine?debug=1",
		"metrics.txt":   "/metrics",
	} {
		resp, err := http.Get(admin + path) //nolint:gosec,noctx // the benchmark's own gateway
		if err != nil {
			b.Fatalf("profile %s: %v", path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatalf("profile %s: %v", path, err)
		}
		if err := os.WriteFile(dir+"/"+kind+"-"+name, body, 0o600); err != nil {
			b.Fatal(err)
		}
	}
}

// dialIdleWSR opens a dialect R WebSocket (/socket) by hand: a consumer
// hello and one subscription, waiting for subscribed. A goroutine of the
// benchmark then answers the relay's ping frames (a peer silent for three
// periods is closed) until the connection closes.
func dialIdleWSR(addr string) (net.Conn, error) {
	c, br, err := idleUpgrade(addr, "/socket", "")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (net.Conn, error) { c.Close(); return nil, err }
	send := func(s string) error { _, err := c.Write(wsClientFrame([]byte(s))); return err }
	if err := send(`{"type":"hello","versions":["0.1"],"role":"consumer","identity":{"agent":"idle"}}`); err != nil {
		return fail(err)
	}
	if err := wsExpect(br, "hello"); err != nil {
		return fail(err)
	}
	if err := send(`{"type":"subscribe","id":"idle"}`); err != nil {
		return fail(err)
	}
	if err := wsExpect(br, "subscribed"); err != nil {
		return fail(err)
	}
	_ = c.SetDeadline(time.Time{})
	go answerRPings(c, br)
	return c, nil
}

// answerRPings answers each dialect R ping frame read from br with a pong
// until the connection fails (the benchmark closed it).
func answerRPings(c net.Conn, br *bufio.Reader) {
	for {
		p, err := wsReadFrame(br)
		if err != nil {
			return
		}
		if i := bytes.Index(p, []byte(`"t":`)); i >= 0 && bytes.Contains(p, []byte(`"type":"ping"`)) {
			t, _, _ := bytes.Cut(p[i+4:], []byte("}"))
			if _, err := c.Write(wsClientFrame([]byte(`{"type":"pong","t":` + string(t) + `}`))); err != nil {
				return
			}
		}
	}
}

// idleUpgrade dials addr and upgrades path to a WebSocket by hand (extra:
// more header lines, each ending in CRLF), leaving a 60 s deadline on the
// connection; br holds what the server sent after its response head.
func idleUpgrade(addr, path, extra string) (net.Conn, *bufio.Reader, error) {
	c, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (net.Conn, *bufio.Reader, error) { c.Close(); return nil, nil, err }
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n%s\r\n", path, addr, extra); err != nil {
		return fail(err)
	}
	br := bufio.NewReaderSize(c, 1024)
	status, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 101") {
		return fail(fmt.Errorf("upgrade: %q %v", status, err))
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return fail(err)
		}
		if line == "\r\n" {
			return c, br, nil
		}
	}
}
