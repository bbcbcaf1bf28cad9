//go:build linux

package transport_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/connlimit"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/internal/queue"
)

// parkServer serves one parked stream per request over a real socket
// behind a connlimit.Listener, as the gateway does: each request drains
// ch. returned is closed when the handler has returned (parked or not),
// ended when the stream's cleanup ran.
type parkServer struct {
	hs       *httptest.Server
	hub      *transport.Hub
	ln       *connlimit.Listener
	returned chan struct{}
	ended    chan struct{}
	errs     atomic.Int32
}

func newParkServer(t *testing.T, cfg transport.SSEConfig, ch *queue.Queue[string], onClose func([]byte) []byte) *parkServer {
	t.Helper()
	return startParkServer(t, cfg, ch, onClose, false)
}

// startParkServer is newParkServer, or with h2 the same handler served
// over TLS with HTTP/2 (and no connlimit.Listener).
func startParkServer(t *testing.T, cfg transport.SSEConfig, ch *queue.Queue[string], onClose func([]byte) []byte, h2 bool) *parkServer {
	t.Helper()
	return startParkServerOn(t, transport.NewHub(0), cfg, ch, onClose, h2)
}

// startParkServerOn is startParkServer admitting its streams in hub.
func startParkServerOn(t *testing.T, hub *transport.Hub, cfg transport.SSEConfig, ch *queue.Queue[string], onClose func([]byte) []byte, h2 bool) *parkServer {
	t.Helper()
	ps := &parkServer{hub: hub, returned: make(chan struct{}), ended: make(chan struct{})}
	ps.hs = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(ps.returned)
		stream, err := ps.hub.Enter("tenant", nil)
		if err != nil {
			t.Error(err)
			return
		}
		var fin transport.Cleanup
		defer fin.Run()
		fin.Add(func() { close(ps.ended) })
		fin.Add(stream.Leave)
		w.Header().Set("X-Custom", "kept") // middleware's headers reach the client
		transport.StartSSE(w)
		cfg := cfg
		cfg.Stream, cfg.Cleanup = stream, &fin
		cfg.OnError = func(error) { ps.errs.Add(1) }
		_ = transport.ServeSSE(w, r, cfg, ch, func(b []byte, s string) ([]byte, error) {
			if s == "bad" {
				return b, errors.New("cannot encode")
			}
			return append(b, "data: "+s+"\n\n"...), nil
		}, onClose)
	}))
	if h2 {
		ps.hs.EnableHTTP2 = true
		ps.hs.StartTLS()
	} else {
		ps.ln = connlimit.New(ps.hs.Listener, connlimit.Config{Max: 10})
		ps.hs.Listener = ps.ln
		ps.hs.Start()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ps.hub.Shutdown(ctx); err != nil {
			t.Errorf("hub shutdown: %v", err)
		}
		ps.hs.Close()
	})
	return ps
}

// waitFor polls cond until it holds (the test's deadline bounds it).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s", what)
		}
	}
}

func TestParkedStreamWritesBatchesAndLastWordsAfterTheHandlerReturned(t *testing.T) {
	ch := queue.New[string](8)
	ps := newParkServer(t, transport.SSEConfig{Preamble: []byte(": marker\n\n"), Batch: 2}, ch,
		func(b []byte) []byte { return append(b, ": closing\n\n"...) })
	resp := get(t, ps.hs.URL)
	if resp.Header.Get("X-Custom") != "kept" || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	<-ps.returned // parked: the handler's goroutine is gone, the stream is not
	if n := ps.hub.Parked(); n != 1 {
		t.Fatalf("hub holds %d parked streams, want 1", n)
	}
	if n := ps.hub.Open("tenant"); n != 1 {
		t.Fatalf("hub holds %d streams of the tenant, want the parked one", n)
	}
	if n := ps.ln.Open(); n != 1 {
		t.Fatalf("connlimit counts %d connections, want the parked one", n)
	}
	want := ": marker\n\n: stream open\n\n"
	for _, s := range []string{"a", "b", "c"} {
		ch.Offer(s)
		want += "data: " + s + "\n\n"
	}
	ch.End()
	if got := readAll(t, resp); got != want+": closing\n\n" {
		t.Fatalf("stream %q, want %q", got, want+": closing\n\n")
	}
	<-ps.ended
	waitFor(t, "released by connlimit", func() bool { return ps.ln.Open() == 0 })
	if n, p := ps.hub.Open("tenant"), ps.hub.Parked(); n != 0 || p != 0 {
		t.Fatalf("hub still holds %d streams, %d parked", n, p)
	}
}

func TestParkedStreamHeartbeat(t *testing.T) {
	ch := queue.New[string](1)
	ps := newParkServer(t, transport.SSEConfig{Heartbeat: 20 * time.Millisecond, HeartbeatComment: "ping"}, ch, nil)
	br := bufio.NewReader(get(t, ps.hs.URL).Body)
	<-ps.returned
	for _, want := range []string{": stream open", "", ": ping", "", ": ping"} {
		line, err := br.ReadString('\n')
		if err != nil || strings.TrimRight(line, "\n") != want {
			t.Fatalf("line %q (%v), want %q", line, err, want)
		}
	}
	ch.End()
	<-ps.ended
}

func TestParkedStreamEndsWhenTheClientLeaves(t *testing.T) {
	ch := queue.New[string](1)
	ps := newParkServer(t, transport.SSEConfig{Heartbeat: time.Hour}, ch, nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ps.hs.URL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	<-ps.returned
	if ps.ln.Open() != 1 {
		t.Fatalf("connlimit counts %d connections, want the parked one", ps.ln.Open())
	}
	cancel() // the client goes away; nothing is written to notice it
	<-ps.ended
	waitFor(t, "released by connlimit", func() bool { return ps.ln.Open() == 0 })
	if n := ps.hub.Open("tenant"); n != 0 {
		t.Fatalf("hub still holds %d streams after the client left", n)
	}
}

func TestParkedStreamsEndOnHubShutdownWithLastWords(t *testing.T) {
	ch := queue.New[string](1)
	ps := newParkServer(t, transport.SSEConfig{
		Heartbeat: time.Hour, WriteTimeout: 20 * time.Millisecond,
		OnShutdown: func(b []byte) []byte { return append(b, ": closing: shutting down\n\n"...) },
	}, ch, nil)
	resp := get(t, ps.hs.URL)
	<-ps.returned
	time.Sleep(60 * time.Millisecond) // idle for longer than the write timeout
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ps.hub.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// Shutdown returned after the stream's cleanup (Leave, the last thing
	// the Hub waits for): joined
	if n, p := ps.hub.Open("tenant"), ps.hub.Parked(); n != 0 || p != 0 {
		t.Fatalf("Hub.Shutdown returned with %d streams admitted, %d parked", n, p)
	}
	if got := readAll(t, resp); got != ": stream open\n\n: closing: shutting down\n\n" {
		t.Fatalf("stream %q", got)
	}
	if err := ps.hub.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
}

func TestParkedStreamReportsEncodingErrors(t *testing.T) {
	ch := queue.New[string](2)
	ps := newParkServer(t, transport.SSEConfig{}, ch, nil)
	resp := get(t, ps.hs.URL)
	<-ps.returned
	ch.Offer("bad")
	if got := readAll(t, resp); got != ": stream open\n\n" {
		t.Fatalf("stream %q", got)
	}
	<-ps.ended
	if ps.errs.Load() != 1 {
		t.Fatalf("OnError called %d times, want 1", ps.errs.Load())
	}
}

func TestParkedStreamEndsOnWriteTimeoutWhenTheClientStopsReading(t *testing.T) {
	ch := queue.New[string](16)
	ps := newParkServer(t, transport.SSEConfig{WriteTimeout: 50 * time.Millisecond, Heartbeat: time.Hour}, ch, nil)
	c, err := net.Dial("tcp", ps.hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	<-ps.returned
	// the client reads nothing more: the socket buffers fill, a write
	// blocks past its deadline, and the stream ends
	big := strings.Repeat("x", 256<<10)
	for {
		select {
		case <-ps.ended:
			waitFor(t, "released by connlimit", func() bool { return ps.ln.Open() == 0 })
			return
		default:
		}
		if !ch.Offer(big) {
			time.Sleep(time.Millisecond) // full: the writer is blocked
		}
	}
}

func TestGoroutinePathWhenParkingIsOff(t *testing.T) {
	ch := queue.New[string](1)
	ps := newParkServer(t, transport.SSEConfig{}, ch, nil)
	ps.hub.SetParking(false)
	resp := get(t, ps.hs.URL)
	ch.Offer("a")
	select {
	case <-ps.returned:
		t.Fatal("the handler returned with parking off and the stream open")
	default:
	}
	if n := ps.hub.Parked(); n != 0 {
		t.Fatalf("%d streams parked with parking off", n)
	}
	ch.End()
	if got := readAll(t, resp); got != ": stream open\n\ndata: a\n\n" {
		t.Fatalf("stream %q", got)
	}
	<-ps.ended
}

// HTTP/2 (here over TLS, as browsers speak it) cannot be hijacked: the
// stream stays in the handler's goroutine, with the same bytes on the wire.
func TestHTTP2StreamsAreNotParked(t *testing.T) {
	ch := queue.New[string](2)
	ps := startParkServer(t, transport.SSEConfig{}, ch, nil, true)
	resp, err := ps.hs.Client().Get(ps.hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("served over %s, want HTTP/2", resp.Proto)
	}
	ch.Offer("a")
	br := bufio.NewReader(resp.Body)
	for _, want := range []string{": stream open", "", "data: a", ""} {
		line, err := br.ReadString('\n')
		if err != nil || strings.TrimRight(line, "\n") != want {
			t.Fatalf("line %q (%v), want %q", line, err, want)
		}
	}
	if n := ps.hub.Parked(); n != 0 {
		t.Fatalf("%d HTTP/2 streams parked", n)
	}
	ch.End()
	<-ps.returned
	<-ps.ended
	if n := ps.hub.Open("tenant"); n != 0 {
		t.Fatalf("hub still holds %d streams", n)
	}
}
