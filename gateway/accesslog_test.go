package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/internal/queue"
)

// logSink is a zerolog writer the test reads while the server writes.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// requests returns the access log lines written so far, decoded.
func (s *logSink) requests(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, m := range s.lines(t) {
		if m["message"] == "request" {
			out = append(out, m)
		}
	}
	return out
}

// lines returns every log line written so far, decoded.
func (s *logSink) lines(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.buf.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, sc.Bytes())
		}
		out = append(out, m)
	}
	return out
}

func (s *logSink) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Reset()
}

func (s *logSink) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitRequests polls until n access log lines exist: the line is written
// after the response, so the client may see the response first.
func (s *logSink) waitRequests(t *testing.T, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		lines := s.requests(t)
		if len(lines) >= n || time.Now().After(deadline) {
			if len(lines) != n {
				t.Fatalf("%d access log lines, want %d:\n%s", len(lines), n, s.text())
			}
			return lines
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAccessLogCarriesRequestIDTenantAndNoSecrets(t *testing.T) {
	ks, err := ParseKeyStore(strings.NewReader("acme sha256:" + sha256hex("secret-key-1") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	sink := &logSink{}
	g := newTestGateway(t, func(c *Config) { c.Keys = ks; c.Logger = zerolog.New(sink).Level(zerolog.InfoLevel) })

	// A well-formed incoming id is kept and returned.
	resp := g.post("/aep/events", "application/json",
		map[string]string{"Authorization": "Bearer secret-key-1", RequestIDHeader: "req-42.a:b_c"}, []byte(dEvent(1, "s1")))
	if resp.status != http.StatusAccepted {
		t.Fatalf("ingest: %d %s", resp.status, resp.body)
	}
	if got := resp.header.Get(RequestIDHeader); got != "req-42.a:b_c" {
		t.Fatalf("X-Request-Id = %q, want the client's", got)
	}
	line := sink.waitRequests(t, 1)[0]
	want := map[string]any{"level": "info", "request_id": "req-42.a:b_c", "method": "POST", "route": "/aep/events",
		"path": "/aep/events", "status": float64(202), "tenant": "acme"}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("access log %s = %v, want %v (line %v)", k, line[k], v, line)
		}
	}
	if b, _ := line["bytes"].(float64); b <= 0 {
		t.Errorf("access log bytes = %v, want the response size", line["bytes"])
	}
	if _, ok := line["latency_ms"].(float64); !ok {
		t.Errorf("access log has no latency_ms: %v", line)
	}
	if remote, _ := line["remote"].(string); !strings.HasPrefix(remote, "127.0.0.1:") {
		t.Errorf("access log remote = %q, want the client's address", remote)
	}

	// The query token of EventSource clients (refused on ingest: it is
	// read on streaming GETs only) and a malformed id: the token never
	// reaches the log, the id is replaced by a generated one.
	resp = g.post("/aep/events?access_token=secret-key-1&types=x", "application/json",
		map[string]string{RequestIDHeader: "has space"}, []byte(dEvent(2, "s1")))
	if resp.status != http.StatusUnauthorized {
		t.Fatalf("ingest with access_token: %d %s, want 401", resp.status, resp.body)
	}
	gen := resp.header.Get(RequestIDHeader)
	if len(gen) != 24 || strings.IndexFunc(gen, badIDRune) >= 0 {
		t.Fatalf("generated X-Request-Id = %q, want 24 hex characters", gen)
	}
	line = sink.waitRequests(t, 2)[1]
	if line["request_id"] != gen || line["tenant"] != "" || line["path"] != "/aep/events" {
		t.Errorf("access log = %v, want request_id %s, no tenant, path without query", line, gen)
	}
	// An unauthenticated request is logged with no tenant.
	if resp := g.post("/aep/events", "application/json", nil, []byte(dEvent(3, "s1"))); resp.status != http.StatusUnauthorized {
		t.Fatalf("no token: %d", resp.status)
	}
	if line := sink.waitRequests(t, 3)[2]; line["tenant"] != "" || line["status"] != float64(401) {
		t.Errorf("unauthenticated request logged as %v", line)
	}
	if strings.Contains(sink.text(), "secret-key-1") || strings.Contains(sink.text(), "access_token") {
		t.Fatalf("a secret reached the log:\n%s", sink.text())
	}
}

func TestAccessLogSamplesButKeepsServerErrors(t *testing.T) {
	sink := &logSink{}
	g := newTestGateway(t, func(c *Config) { c.Logger = zerolog.New(sink); c.AccessLogSampleN = 3 })
	g.srv.Mount(aep.DialectD, "/boom", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	for range 6 {
		resp, err := http.Get(g.http.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	sink.waitRequests(t, 2) // one in three of six
	resp, err := http.Get(g.http.URL + "/boom")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	lines := sink.waitRequests(t, 3) // the panic's 500 is logged whatever the sample
	if last := lines[2]; last["status"] != float64(500) || last["route"] != "/boom" {
		t.Fatalf("server error not logged: %v", last)
	}
	if !strings.Contains(sink.text(), `"request_id":"`+resp.Header.Get(RequestIDHeader)+`","message":"handler panicked"`) {
		t.Fatalf("panic log lacks the request id:\n%s", sink.text())
	}
}

// histogramCount is the sample count of a histogram series with route.
func histogramCount(t *testing.T, reg *prometheus.Registry, name, route string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "route" && l.GetValue() == route {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

// The latency histogram's help says streams are excluded: SSE responses and
// WebSocket sessions go to aep_http_stream_duration_seconds instead.
func TestRequestHistogramExcludesStreams(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := newTestGateway(t, func(c *Config) { c.Registry = reg })
	g.srv.MountMethod(aep.DialectD, http.MethodGet, "/aep/events", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		for i := range 3 {
			fmt.Fprintf(w, "id: %d\ndata: {}\n\n", i)
			w.(http.Flusher).Flush()
		}
	}))
	g.srv.Mount(aep.DialectR, "/socket", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		_, msg, err := c.Read(r.Context())
		if err == nil {
			_ = c.Write(r.Context(), websocket.MessageText, msg)
		}
		_ = c.Close(websocket.StatusNormalClosure, "")
	}))

	for i := range 2 {
		if resp := g.post("/aep/events", "application/json", nil, []byte(dEvent(i, "s"))); resp.status != http.StatusAccepted {
			t.Fatalf("ingest: %d %s", resp.status, resp.body)
		}
	}
	resp, err := http.Get(g.http.URL + "/aep/events?types=x")
	if err != nil {
		t.Fatal(err)
	}
	body := new(bytes.Buffer)
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if !strings.Contains(body.String(), "id: 2") {
		t.Fatalf("stream body: %q", body.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(g.http.URL, "http")+"/socket", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ws.Read(ctx); err != nil {
		t.Fatal(err)
	}
	_, _, _ = ws.Read(ctx) // the server's close
	ws.CloseNow()

	// A refused upgrade is an ordinary request.
	refused, err := http.NewRequest(http.MethodGet, g.http.URL+"/socket", nil)
	if err != nil {
		t.Fatal(err)
	}
	refused.Header.Set("Upgrade", "websocket")
	refused.Header.Set("Connection", "Upgrade")
	if resp, err := http.DefaultClient.Do(refused); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("upgrade without a key: %d, want 400 from websocket.Accept", resp.StatusCode)
	}

	// The middleware observes after the handler returns: poll.
	deadline := time.Now().Add(5 * time.Second)
	for (histogramCount(t, reg, "aep_http_stream_duration_seconds", "/socket") == 0 ||
		histogramCount(t, reg, "aep_http_request_duration_seconds", "/socket") == 0) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range []struct {
		name, route string
		want        uint64
	}{
		{"aep_http_request_duration_seconds", "/aep/events", 2}, // the two POSTs only
		{"aep_http_stream_duration_seconds", "/aep/events", 1},
		{"aep_http_request_duration_seconds", "/socket", 1}, // the refused upgrade
		{"aep_http_stream_duration_seconds", "/socket", 1},
	} {
		if got := histogramCount(t, reg, c.name, c.route); got != c.want {
			t.Errorf("%s{route=%q} count = %d, want %d", c.name, c.route, got, c.want)
		}
	}
}

// BenchmarkAccessLog is the access log's cost per request (JSON to
// io.Discard): every request logged against none but server errors.
func BenchmarkAccessLog(b *testing.B) {
	for _, c := range []struct {
		name    string
		sampleN int
	}{{"every", 1}, {"sampled-1-in-100", 100}, {"off", math.MaxInt}} {
		b.Run(c.name, func(b *testing.B) {
			a := newAccessLogger(zerolog.New(io.Discard), c.sampleN)
			r := chi.NewRouter()
			r.Use(a.middleware)
			r.With(authenticate(Authenticator{}, aep.DialectD)).Post("/aep/events", func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusAccepted)
				_, _ = w.Write([]byte(`{"accepted":1}`))
			})
			req := httptest.NewRequest(http.MethodPost, "/aep/events?access_token=t", nil)
			req.Header.Set(RequestIDHeader, "bench-1")
			b.ReportAllocs()
			for b.Loop() {
				r.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
	}
}

// A parked SSE stream outlives its handler: its access log line and its
// aep_http_stream_duration_seconds sample come when it ends, with the
// bytes it wrote, not when the handler returned.
func TestParkedStreamIsLoggedAndTimedWhenItEnds(t *testing.T) {
	reg := prometheus.NewRegistry()
	sink := &logSink{}
	g := newTestGateway(t, func(c *Config) { c.Registry = reg; c.Logger = zerolog.New(sink).Level(zerolog.InfoLevel) })
	hub := transport.NewHub(0)
	q := queue.New[string](4)
	returned := make(chan struct{})
	g.srv.MountMethod(aep.DialectD, http.MethodGet, "/parked", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(returned)
		stream, err := hub.Enter("t", nil)
		if err != nil {
			t.Error(err)
			return
		}
		var fin transport.Cleanup
		defer fin.Run()
		fin.Add(stream.Leave)
		transport.StartSSE(w)
		_ = transport.ServeSSE(w, r, transport.SSEConfig{Stream: stream, Cleanup: &fin}, q,
			func(b []byte, s string) ([]byte, error) { return append(b, "data: "+s+"\n\n"...), nil }, nil)
	}))
	resp, err := http.Get(g.http.URL + "/parked")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	<-returned
	if hub.Parked() != 1 {
		t.Fatalf("%d streams parked, want 1", hub.Parked())
	}
	if n := len(sink.requests(t)); n != 0 {
		t.Fatalf("%d access log lines while the parked stream is open", n)
	}
	if n := histogramCount(t, reg, "aep_http_stream_duration_seconds", "/parked"); n != 0 {
		t.Fatalf("stream duration observed while the stream is open (%d samples)", n)
	}
	q.Offer("a")
	q.End()
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != ": stream open\n\ndata: a\n\n" {
		t.Fatalf("body %q, %v", body, err)
	}
	line := sink.waitRequests(t, 1)[0]
	if line["route"] != "/parked" || line["status"] != float64(200) || line["bytes"] != float64(len(body)) || line["method"] != "GET" {
		t.Fatalf("access log line %v, want route /parked, status 200, bytes %d", line, len(body))
	}
	// the sample is taken right after the line: poll for it
	for deadline := time.Now().Add(5 * time.Second); histogramCount(t, reg, "aep_http_stream_duration_seconds", "/parked") != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the parked stream's duration was not observed")
		}
	}
	if n := histogramCount(t, reg, "aep_http_request_duration_seconds", "/parked"); n != 0 {
		t.Fatalf("a parked stream went to the request latency histogram (%d samples)", n)
	}
}

// Probes and scrapes are polled every few seconds: at info they write no
// access line, at debug they do; a failing probe is still logged at info.
func TestProbeRequestsLoggedAtDebugOnly(t *testing.T) {
	for _, lvl := range []zerolog.Level{zerolog.InfoLevel, zerolog.DebugLevel} {
		sink := &logSink{}
		g := newTestGateway(t, func(c *Config) { c.Logger = zerolog.New(sink).Level(lvl) })
		// Ready first: a failing probe (503 before the first broker probe
		// answered) is logged at info by design.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			resp, err := http.Get(g.http.URL + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz never answered 200 (last %d)", resp.StatusCode)
			}
		}
		if lvl == zerolog.DebugLevel { // its line may still be on its way
			for deadline := time.Now().Add(5 * time.Second); !slices.ContainsFunc(sink.requests(t), func(l map[string]any) bool {
				return l["route"] == "/readyz" && l["status"] == float64(http.StatusOK)
			}); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no access line for the ready probe at debug")
				}
			}
		}
		sink.reset()
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			resp, err := http.Get(g.http.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		// An ordinary request after them: its line proves the probes' were
		// written (or not) before it.
		if resp := g.post("/aep/events", "application/json", nil, []byte(dEvent(1, "s"))); resp.status != http.StatusAccepted {
			t.Fatalf("ingest: %d %s", resp.status, resp.body)
		}
		var probes int
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			lines := sink.requests(t)
			if len(lines) > 0 && lines[len(lines)-1]["route"] == "/aep/events" {
				probes = len(lines) - 1
				for _, l := range lines[:probes] {
					if l["level"] != "debug" {
						t.Errorf("probe line at %v: %v", l["level"], l)
					}
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no access line for the ingest request: %v", lines)
			}
		}
		if want := map[zerolog.Level]int{zerolog.InfoLevel: 0, zerolog.DebugLevel: 3}[lvl]; probes != want {
			t.Errorf("log level %v: %d probe lines, want %d", lvl, probes, want)
		}
	}
}
