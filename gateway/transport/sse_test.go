package transport_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/internal/queue"
)

// sseServer serves one ServeSSE loop per request over a real socket; each
// request drains ch.
func sseServer(t *testing.T, cfg transport.SSEConfig, ch *queue.Queue[string], onClose func([]byte) []byte) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !transport.CanStream(w) {
			t.Error("httptest's ResponseWriter cannot stream")
			return
		}
		transport.StartSSE(w)
		err := transport.ServeSSE(w, r, cfg, ch, func(b []byte, s string) ([]byte, error) {
			if s == "bad" {
				return b, errors.New("cannot encode")
			}
			return append(b, "data: "+s+"\n\n"...), nil
		}, onClose)
		if err != nil {
			_, _ = io.WriteString(w, ": error "+err.Error()+"\n\n") // visible to the test
		}
	}))
	t.Cleanup(hs.Close)
	return hs
}

func get(t *testing.T, url string) *http.Response {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" || resp.Header.Get("X-Accel-Buffering") != "no" ||
		resp.Header.Get("Cache-Control") != "no-cache" { // D transport-sse.md requires no-cache
		t.Fatalf("headers %v", resp.Header)
	}
	return resp
}

// readAll reads the whole stream; it must end cleanly (no truncated
// chunk).
func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("stream did not end cleanly: %v (read %q)", err, b)
	}
	return string(b)
}

func TestServeSSEWritesPreambleBatchesAndLastWords(t *testing.T) {
	// 3 elements fill a second batch partly, 4 exactly (the end is seen
	// after a full batch).
	for _, els := range [][]string{{"a", "b", "c"}, {"a", "b", "c", "d"}} {
		ch := queue.New[string](8)
		want := ": marker\n\n: stream open\n\n"
		for _, s := range els {
			ch.Offer(s)
			want += "data: " + s + "\n\n"
		}
		ch.End()
		hs := sseServer(t, transport.SSEConfig{Preamble: []byte(": marker\n\n"), Batch: 2}, ch,
			func(b []byte) []byte { return append(b, ": closing\n\n"...) })
		if got := readAll(t, get(t, hs.URL)); got != want+": closing\n\n" {
			t.Fatalf("stream %q, want %q", got, want+": closing\n\n")
		}
	}
}

func TestServeSSEHeartbeatWhileIdle(t *testing.T) {
	ch := queue.New[string](1)
	hs := sseServer(t, transport.SSEConfig{Heartbeat: 20 * time.Millisecond, HeartbeatComment: "ping"}, ch, nil)
	br := bufio.NewReader(get(t, hs.URL).Body)
	for _, want := range []string{": stream open", "", ": ping", "", ": ping"} {
		line, err := br.ReadString('\n')
		if err != nil || strings.TrimRight(line, "\n") != want {
			t.Fatalf("line %q (%v), want %q", line, err, want)
		}
	}
	ch.End()
}

func TestServeSSEEndsOnShutdownAfterIdlingPastItsWriteTimeout(t *testing.T) {
	ch := queue.New[string](1)
	shutdown := make(chan struct{})
	hs := sseServer(t, transport.SSEConfig{
		Heartbeat: time.Hour, WriteTimeout: 20 * time.Millisecond, Shutdown: shutdown,
		OnShutdown: func(b []byte) []byte { return append(b, ": closing: shutting down\n\n"...) },
	}, ch, nil)
	resp := get(t, hs.URL)
	time.Sleep(60 * time.Millisecond) // idle for longer than the write timeout
	close(shutdown)
	if got := readAll(t, resp); got != ": stream open\n\n: closing: shutting down\n\n" {
		t.Fatalf("stream %q", got)
	}
}

func TestServeSSEReturnsEncodingErrors(t *testing.T) {
	ch := queue.New[string](1)
	ch.Offer("bad")
	hs := sseServer(t, transport.SSEConfig{}, ch, nil)
	if got := readAll(t, get(t, hs.URL)); !strings.Contains(got, ": error cannot encode") {
		t.Fatalf("stream %q, want the encoding error", got)
	}
}

func TestServeSSELeavesWhenTheClientDoes(t *testing.T) {
	ch := queue.New[string](1)
	returned := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		transport.StartSSE(w)
		_ = transport.ServeSSE(w, r, transport.SSEConfig{}, ch, func(b []byte, s string) ([]byte, error) { return b, nil }, nil)
		close(returned)
	}))
	defer hs.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	cancel()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("ServeSSE still running after the client left")
	}
}

// leasedSource is a queue whose elements must not reach the client after
// until (a durable stream's lease).
type leasedSource struct {
	*queue.Queue[string]
	until atomic.Int64 // unix nanoseconds
}

func (s *leasedSource) WriteDeadline() time.Time { return time.Unix(0, s.until.Load()) }

// A source's WriteDeadline bounds every write: once it passed (a holder
// that woke after its lease ran out), an element is not written and the
// stream ends; before it, elements go as usual.
func TestServeSSEWritesNothingPastTheSourceDeadline(t *testing.T) {
	for _, lapsed := range []bool{false, true} {
		src := &leasedSource{Queue: queue.New[string](8)}
		src.until.Store(time.Now().Add(time.Hour).UnixNano())
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			transport.StartSSE(w)
			_ = transport.ServeSSE(w, r, transport.SSEConfig{}, transport.Source[string](src),
				func(b []byte, s string) ([]byte, error) { return append(b, "data: "+s+"\n\n"...), nil }, nil)
		}))
		resp := get(t, hs.URL)
		br := bufio.NewReader(resp.Body)
		if line, err := br.ReadString('\n'); err != nil || line != ": stream open\n" {
			t.Fatalf("first line %q %v", line, err)
		}
		if lapsed {
			src.until.Store(time.Now().Add(-time.Second).UnixNano())
		}
		src.Offer("x")
		src.End()
		rest, _ := io.ReadAll(br)
		if got := strings.Contains(string(rest), "data: x"); got == lapsed {
			t.Fatalf("lapsed %v: stream after the first line %q", lapsed, rest)
		}
		hs.Close()
	}
}

// Over HTTP/2 a stream's write deadline resets the stream when it passes,
// written to or not: an SSE stream idle for longer than its WriteTimeout
// must still be open, deliver what comes next, and end cleanly (before the
// deadline was lifted after each write, Chromium's EventSource got
// ERR_HTTP2_PROTOCOL_ERROR WriteTimeout after the last event).
func TestServeSSEOverHTTP2OutlivesItsWriteTimeoutWhileIdle(t *testing.T) {
	ch := queue.New[string](4)
	shutdown := make(chan struct{})
	cfg := transport.SSEConfig{Heartbeat: time.Hour, WriteTimeout: 30 * time.Millisecond, Shutdown: shutdown,
		OnShutdown: func(b []byte) []byte { return append(b, ": closing\n\n"...) }}
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		transport.StartSSE(w)
		_ = transport.ServeSSE(w, r, cfg, ch, func(b []byte, s string) ([]byte, error) { return append(b, "data: "+s+"\n\n"...), nil }, nil)
	}))
	hs.EnableHTTP2 = true
	hs.StartTLS()
	t.Cleanup(hs.Close)
	resp, err := hs.Client().Get(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("HTTP/%d, want 2", resp.ProtoMajor)
	}
	br := bufio.NewReader(resp.Body)
	line := func() string {
		s, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream broken: %v (after %q)", err, s)
		}
		return s
	}
	if l := line(); l != ": stream open\n" {
		t.Fatalf("first line %q", l)
	}
	line()
	time.Sleep(200 * time.Millisecond) // idle for several write timeouts
	if err := ch.Push(context.Background(), "after the idle"); err != nil {
		t.Fatal(err)
	}
	if l := line(); l != "data: after the idle\n" {
		t.Fatalf("after the idle: %q", l)
	}
	line()
	time.Sleep(200 * time.Millisecond)
	close(shutdown)
	if l := line(); l != ": closing\n" {
		t.Fatalf("last words %q", l)
	}
}
