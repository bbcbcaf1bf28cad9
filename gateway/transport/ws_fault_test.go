//go:build linux

package transport_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/internal/queue"
)

// faultConn is a real TCP connection with two faults on demand: its writes
// fail (failWrite: the error a reset peer gives), and its Close runs
// onClose after the descriptor was released, so that a test can act
// while a closed descriptor's number is free.
type faultConn struct {
	*net.TCPConn
	fd        int
	failWrite atomic.Bool
	closes    atomic.Int32
	onClose   func(*faultConn)
}

func (c *faultConn) Write(b []byte) (int, error) {
	if c.failWrite.Load() {
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}
	}
	return c.TCPConn.Write(b)
}

func (c *faultConn) Close() error {
	err := c.TCPConn.Close()
	if c.closes.Add(1) == 1 && c.onClose != nil {
		c.onClose(c)
	}
	return err
}

// faultListener hands out faultConns, in accept order on conns. With
// turns set, each accept waits for a token there first: a test decides
// when the server takes a descriptor for a connection the client made.
type faultListener struct {
	net.Listener
	conns chan *faultConn
	turns chan struct{}
}

func (l *faultListener) Accept() (net.Conn, error) {
	if l.turns != nil {
		<-l.turns
	}
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := nc.(*net.TCPConn)
	fc := &faultConn{TCPConn: tc, fd: -1}
	if rc, err := tc.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { fc.fd = int(fd) })
	}
	l.conns <- fc
	return fc, nil
}

// faultServer serves parked, echoing WebSocket connections (Ready on the
// first message, as newWSParkServer) over a faultListener; tune adjusts
// each connection's WSConfig. feeds gets each connection's pump queue.
type faultServer struct {
	url           string
	hub           *transport.Hub
	ln            *faultListener
	feeds         chan *queue.Queue[string]
	served, ended atomic.Int64
}

func newFaultServer(t *testing.T, tune func(*transport.WSConfig)) *faultServer {
	return newFaultServerWith(t, faultOpts{tune: tune})
}

// faultOpts are a faultServer's options: tune adjusts each connection's
// WSConfig, turns gates accepts (faultListener), hub admits the streams
// (nil: a new Hub).
type faultOpts struct {
	tune  func(*transport.WSConfig)
	turns chan struct{}
	hub   *transport.Hub
	onMsg func(data []byte) // runs in the reader before each echo
}

func newFaultServerWith(t *testing.T, o faultOpts) *faultServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hub := o.hub
	if hub == nil {
		hub = transport.NewHub(0)
	}
	tune, turns, onMsg := o.tune, o.turns, o.onMsg
	fs := &faultServer{hub: hub, ln: &faultListener{Listener: ln, conns: make(chan *faultConn, 100), turns: turns},
		feeds: make(chan *queue.Queue[string], 100)}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stream, err := fs.hub.Enter("t", nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		ws, err := transport.Upgrade(w, r, transport.UpgradeOptions{})
		if err != nil {
			stream.Leave()
			return
		}
		cfg := transport.WSConfig{
			HandshakeTimeout: 5 * time.Second,
			Stream:           stream,
			Ended:            func() { fs.ended.Add(1); stream.Leave() },
		}
		if tune != nil {
			tune(&cfg)
		}
		c := transport.NewConn(ws, cfg)
		stream.OnShutdown(func() { c.CloseAfter(nil, websocket.StatusGoingAway, "shutdown") })
		q := queue.New[string](16)
		transport.Pump(c, q, func(s string) bool { return c.Send([]byte("fed:" + s)) }, func(bool) {})
		fs.feeds <- q
		c.Serve(func(_ websocket.MessageType, data []byte) bool {
			c.Ready()
			c.StartHeartbeat()
			if onMsg != nil {
				onMsg(data)
			}
			return c.Send([]byte("echo:" + string(data)))
		}, q.End)
		fs.served.Add(1)
	})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(fs.ln) }()
	t.Cleanup(func() {
		if turns != nil {
			close(turns)
		}
		_ = srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = fs.hub.Shutdown(ctx)
	})
	fs.url = "ws://" + ln.Addr().String()
	return fs
}

// connect dials, exchanges one message (which makes the connection Ready)
// and waits until it parked; it returns the client and the server's side.
func (fs *faultServer) connect(t *testing.T) (*websocket.Conn, *faultConn, *queue.Queue[string]) {
	t.Helper()
	return fs.connectOver(t, nil)
}

// connectOver is connect over nc, a TCP connection dialed already (nil:
// dial one).
func (fs *faultServer) connectOver(t *testing.T, nc net.Conn) (*websocket.Conn, *faultConn, *queue.Queue[string]) {
	t.Helper()
	before := fs.served.Load()
	var cl *websocket.Conn
	if nc == nil {
		cl = dial(t, fs.url)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		hc := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return nc, nil }}}
		var err error
		if cl, _, err = websocket.Dial(ctx, fs.url, &websocket.DialOptions{HTTPClient: hc}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.CloseNow() })
	}
	fc, feed := <-fs.ln.conns, <-fs.feeds
	echo(t, cl, "hi")
	waitUntil(t, "the connection to park", func() bool { return fs.served.Load() == before+1 })
	return cl, fc, feed
}

// echo sends msg and wants its echo within 5 s.
func echo(t *testing.T, cl *websocket.Conn, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cl.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	if _, b, err := cl.Read(ctx); err != nil || string(b) != "echo:"+msg {
		t.Fatalf("echo of %q: read %q, %v", msg, b, err)
	}
}

// openFDs is the number of descriptors the process holds.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// A parked connection whose write fails gives its descriptor up only once
// the poller no longer watches it: a connection that gets the same
// descriptor number meanwhile is still watched afterwards (it reads).
func TestParkedConnWriteFailureKeepsAReusedDescriptorWatched(t *testing.T) {
	turns := make(chan struct{}, 1)
	fs := newFaultServerWith(t, faultOpts{turns: turns})
	turns <- struct{}{}
	_, a, feedA := fs.connect(t)
	// B's client socket exists before A's number is freed (it must not
	// take it); the server accepts B only once it is.
	nb, err := net.Dial("tcp", fs.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	closing := make(chan struct{})
	a.onClose = func(*faultConn) {
		close(closing)
		<-released // A's number is free: B takes it meanwhile
	}
	a.failWrite.Store(true)
	feedA.Offer("x") // A's writer fails
	select {
	case <-closing:
	case <-time.After(10 * time.Second):
		t.Fatal("the failed connection was never closed")
	}
	turns <- struct{}{}
	b, bc, _ := fs.connectOver(t, nb)
	if bc.fd != a.fd {
		t.Fatalf("the new connection has descriptor %d, not the freed %d: nothing to show", bc.fd, a.fd)
	}
	close(released)
	waitUntil(t, "the failed connection's end", func() bool { return fs.ended.Load() == 1 })
	echo(t, b, "still watched") // B's message wakes the poller
	if got := fs.hub.ParkedWebSockets(); got != 1 {
		t.Fatalf("ParkedWebSockets = %d, want 1 (B)", got)
	}
}

// A ping or heartbeat frame that cannot be written while the connection
// is parked (no reader to notice) ends the connection cleanly: Ended once,
// its admission left, its descriptor closed, no goroutine of it left.
func TestParkedConnHeartbeatWriteFailureEndsIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		hb   transport.Heartbeat
	}{
		{"protocol-ping", transport.Heartbeat{Every: 20 * time.Millisecond}},
		{"frame", transport.Heartbeat{Every: 20 * time.Millisecond, Frame: func() []byte { return []byte("hb") }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFaultServer(t, func(c *transport.WSConfig) { c.Heartbeat = tc.hb })
			goroutines, fds := runtime.NumGoroutine(), openFDs(t)
			cl, a, _ := fs.connect(t)
			a.failWrite.Store(true)
			waitUntil(t, "the connection's end", func() bool { return fs.ended.Load() == 1 })
			if n := fs.hub.Open("t"); n != 0 {
				t.Fatalf("%d streams still admitted", n)
			}
			if n := fs.hub.ParkedWebSockets(); n != 0 {
				t.Fatalf("ParkedWebSockets = %d, want 0", n)
			}
			_ = cl.CloseNow()
			waitUntil(t, "the descriptors and goroutines to go", func() bool {
				return a.closes.Load() >= 1 && openFDs(t) <= fds && runtime.NumGoroutine() <= goroutines
			})
			if n := fs.ended.Load(); n != 1 {
				t.Fatalf("Ended ran %d times, want 1", n)
			}
		})
	}
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// readLines reads n lines of an SSE body and wants them.
func readLines(t *testing.T, br *bufio.Reader, want ...string) {
	t.Helper()
	for _, w := range want {
		line, err := br.ReadString('\n')
		if err != nil || strings.TrimRight(line, "\n") != w {
			t.Fatalf("line %q (%v), want %q", line, err, w)
		}
	}
}

// When the Hub's poller fails (its epoll_wait), the failure is logged,
// counted and reported (PollerErr, which /readyz shows), every parked
// stream, SSE and WebSocket, moves to a goroutine of its own and goes on
// working and ending as before, and no new stream parks.
func TestPollerFailureMovesParkedStreamsToGoroutines(t *testing.T) {
	hub := transport.NewHub(0)
	var logs syncBuffer
	hub.SetLogger(zerolog.New(&logs))
	ch := queue.New[string](8)
	sse := startParkServerOn(t, hub, transport.SSEConfig{Heartbeat: time.Hour}, ch, nil, false)
	fs := newFaultServerWith(t, faultOpts{hub: hub})
	resp := get(t, sse.hs.URL)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	readLines(t, br, ": stream open", "")
	<-sse.returned
	a, _, feedA := fs.connect(t)
	b, _, _ := fs.connect(t)
	if p, w := hub.Parked(), hub.ParkedWebSockets(); p != 1 || w != 2 {
		t.Fatalf("%d SSE streams and %d WebSockets parked, want 1 and 2", p, w)
	}

	if !hub.FailPoller(errors.New("injected epoll failure")) {
		t.Fatal("no poller to fail")
	}
	waitUntil(t, "every stream off the poller", func() bool { return hub.Parked() == 0 && hub.ParkedWebSockets() == 0 })
	if n, err := hub.PollerFailures(), hub.PollerErr(); n != 1 || err == nil || !strings.Contains(err.Error(), "injected epoll failure") {
		t.Fatalf("PollerFailures %d, PollerErr %v: want 1 and the cause", n, err)
	}
	waitUntil(t, "the failure logged", func() bool { return strings.Contains(logs.String(), "the poller failed") })

	// They go on working: reads, pumped writes, SSE data.
	echo(t, a, "after the failure")
	feedA.Offer("x")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, got, err := a.Read(ctx); err != nil || string(got) != "fed:x" {
		t.Fatalf("pumped after the failure: %q, %v", got, err)
	}
	ch.Offer("s")
	readLines(t, br, "data: s", "")
	// A client that leaves still ends its stream, once.
	_ = b.CloseNow()
	waitUntil(t, "the left WebSocket's end", func() bool { return fs.ended.Load() == 1 })
	ch.End()
	<-sse.ended

	// New streams keep their goroutines: after two messages a WebSocket
	// that parked after the first would count as parked.
	c := dial(t, fs.url)
	<-fs.ln.conns
	<-fs.feeds
	echo(t, c, "one")
	echo(t, c, "two")
	ch2 := queue.New[string](1)
	sse2 := startParkServerOn(t, hub, transport.SSEConfig{Heartbeat: time.Hour}, ch2, nil, false)
	resp2 := get(t, sse2.hs.URL)
	defer resp2.Body.Close()
	br2 := bufio.NewReader(resp2.Body)
	ch2.Offer("y") // a parked stream would count as parked before it writes this
	readLines(t, br2, ": stream open", "", "data: y", "")
	if p, w := hub.Parked(), hub.ParkedWebSockets(); p != 0 || w != 0 {
		t.Fatalf("after the failure %d SSE streams and %d WebSockets parked, want none", p, w)
	}
	ch2.End()
	<-sse2.ended
	closed := make(chan websocket.StatusCode, 2)
	for _, cl := range []*websocket.Conn{a, c} {
		go func() {
			_, _, err := cl.Read(context.Background()) // answers the close
			closed <- websocket.CloseStatus(err)
		}()
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := hub.Shutdown(ctx2); err != nil {
		t.Fatalf("shutdown after the failure: %v", err)
	}
	if n := fs.ended.Load(); n != 3 {
		t.Fatalf("%d WebSockets ended, want 3", n)
	}
	for range 2 {
		if st := <-closed; st != websocket.StatusGoingAway {
			t.Fatalf("closed with %d, want 1001", st)
		}
	}
}

// connectRaw opens a hand-written client's connection, makes it Ready
// with one message and waits until it parked.
func (fs *faultServer) connectRaw(t *testing.T) *rawClient {
	t.Helper()
	before := fs.served.Load()
	c, head := dialRaw(t, fs.ln.Addr().String(), "")
	if !strings.HasPrefix(head, "101") {
		t.Fatalf("handshake: %q", head)
	}
	<-fs.ln.conns
	<-fs.feeds
	c.frame(true, 0x1, []byte("hi"), true)
	c.wantFrame(0x1, "echo:hi")
	waitUntil(t, "the connection to park", func() bool { return fs.served.Load() == before+1 })
	return c
}

// A control frame alone (a pong: what a heartbeat's ping brings back)
// wakes a parked connection for that frame only: no reader stays blocked
// waiting for a data message after it.
func TestParkedConnHoldsNoReaderAfterAControlFrame(t *testing.T) {
	fs := newFaultServer(t, nil)
	const n = 20
	cls := make([]*rawClient, n)
	for i := range cls {
		cls[i] = fs.connectRaw(t)
	}
	before := runtime.NumGoroutine()
	for _, c := range cls {
		c.frame(true, 0xA, []byte("pong"), true) // unsolicited pong: allowed, ignored
	}
	for _, c := range cls {
		c.frame(true, 0x9, []byte("ping"), true)
		c.wantFrame(0xA, "ping") // the reader ran and answered
	}
	waitUntil(t, "the readers to leave", func() bool { return runtime.NumGoroutine() < before+n/2 })
	for _, c := range cls {
		c.frame(true, 0x1, []byte("data"), true)
		c.wantFrame(0x1, "echo:data") // still parked and reading
	}
	if got := fs.hub.ParkedWebSockets(); got != n {
		t.Fatalf("ParkedWebSockets = %d, want %d", got, n)
	}
}

// A parked connection whose peer starts a message and stalls is ended
// within its ReadTimeout (the heartbeat is off: nothing else would).
func TestParkedConnStalledMidMessageIsEndedByReadTimeout(t *testing.T) {
	fs := newFaultServer(t, func(c *transport.WSConfig) { c.ReadTimeout = 100 * time.Millisecond })
	c := fs.connectRaw(t)
	// a masked text frame announcing 10 bytes, of which 3 come
	if _, err := c.nc.Write([]byte{0x81, 0x80 | 10, 1, 2, 3, 4, 'a' ^ 1, 'b' ^ 2, 'c' ^ 3}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the stalled connection's end", func() bool { return fs.ended.Load() == 1 })
	if n := fs.hub.Open("t"); n != 0 {
		t.Fatalf("%d streams still admitted", n)
	}
	// A connection that sends whole messages, slower than ReadTimeout
	// between them, is not cut: idle is not stalled.
	d := fs.connectRaw(t)
	for range 3 {
		time.Sleep(150 * time.Millisecond) // longer than ReadTimeout, idle
		d.frame(true, 0x1, []byte("slow"), true)
		d.wantFrame(0x1, "echo:slow")
	}
}

// A parked connection whose peer stops answering is ended by its
// heartbeat, without a reader: it does not answer protocol pings (a
// hand-written client answers nothing by itself), or, with a frame
// heartbeat, sends nothing for three periods. It gets its close (1008)
// and ends once.
func TestParkedConnSilentPeerIsTimedOut(t *testing.T) {
	for _, tc := range []struct {
		name string
		hb   transport.Heartbeat
	}{
		{"protocol-ping", transport.Heartbeat{Every: 30 * time.Millisecond}},
		{"frame", transport.Heartbeat{Every: 30 * time.Millisecond, Frame: func() []byte { return []byte("hb") }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFaultServer(t, func(c *transport.WSConfig) { c.Heartbeat = tc.hb })
			c := fs.connectRaw(t)
			c.wantClose(websocket.StatusPolicyViolation)     // pings or "hb" frames before it are skipped
			c.frame(true, 0x8, closePayload(1008, ""), true) // the close handshake's answer
			waitUntil(t, "the silent peer's end", func() bool { return fs.ended.Load() == 1 })
			if n := fs.hub.Open("t"); n != 0 {
				t.Fatalf("%d streams still admitted", n)
			}
		})
	}
}

// A poller that fails while a parked connection's reader is handling a
// message (so that its Rearm meets the failure, or the Hub's unpark comes
// first: either way) leaves the connection reading in its goroutine.
func TestPollerFailureDuringAParkedRead(t *testing.T) {
	hub := transport.NewHub(0)
	fs := newFaultServerWith(t, faultOpts{hub: hub, onMsg: func(data []byte) {
		if string(data) != "fail" {
			return
		}
		if !hub.FailPoller(errors.New("injected mid-read")) {
			return // not parked: the test fails below
		}
		for hub.PollerErr() == nil { // recorded before Rearm runs
			runtime.Gosched()
		}
	}})
	a, _, _ := fs.connect(t)
	echo(t, a, "fail")
	waitUntil(t, "the connection off the poller", func() bool { return hub.ParkedWebSockets() == 0 })
	for _, m := range []string{"one", "two", "three"} {
		echo(t, a, m)
	}
	if n := fs.ended.Load(); n != 0 {
		t.Fatalf("%d connections ended", n)
	}
}

// In Serve's goroutine (parking off) a failed write ends the connection
// too: the socket is shut down, not closed, and the blocked reader reads
// its end at once.
func TestServedConnWriteFailureEndsIt(t *testing.T) {
	hub := transport.NewHub(0)
	hub.SetParking(false)
	fs := newFaultServerWith(t, faultOpts{hub: hub})
	cl := dial(t, fs.url)
	a, feed := <-fs.ln.conns, <-fs.feeds
	echo(t, cl, "hi")
	a.failWrite.Store(true)
	feed.Offer("x") // the writer fails
	waitUntil(t, "Serve to return and the connection to end", func() bool {
		return fs.served.Load() == 1 && fs.ended.Load() == 1 && a.closes.Load() == 1
	})
}
