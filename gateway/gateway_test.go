package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/internal/tracing"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

type testGateway struct {
	t       testing.TB
	cluster *kfake.Cluster
	client  *kgo.Client
	srv     *Server
	http    *httptest.Server
	parts   int32
}

func newTestGateway(t *testing.T, mutate func(*Config)) *testGateway {
	return newTestGatewayTB(t, mutate)
}

func newTestGatewayB(b *testing.B) *testGateway { return newTestGatewayTB(b, nil) }

func newTestGatewayTB(t testing.TB, mutate func(*Config)) *testGateway {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	opts := append([]kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}, NewProducerOpts(DefaultLimits.MaxEventBytes, 2*time.Second)...)
	cl, err := kgo.NewClient(append(opts, tracing.KafkaHooks()...)...) // none unless a benchmark turned tracing on
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	const parts = 4
	prov, err := partitioning.NewProvisioner(kadm.NewClient(cl), partitioning.Naming{}, partitioning.TopicConfig{Partitions: parts, ReplicationFactor: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Logger: zerolog.New(io.Discard), WriteTimeout: 10 * time.Second}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := New(cfg, Deps{Topics: prov, Writer: KafkaWriter{Client: cl}, Pinger: cl})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		_ = srv.Shutdown(context.Background())
	})
	return &testGateway{t: t, cluster: cluster, client: cl, srv: srv, http: hs, parts: parts}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response body is not a JSON object: %v: %s", err, r.body)
	}
	return m
}

func (g *testGateway) post(path, contentType string, hdr map[string]string, body []byte) response {
	g.t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.http.URL+path, bytes.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// postHeadersOnly sends a request's headers declaring a body of n bytes,
// none of which it sends, and reads the answer.
func (g *testGateway) postHeadersOnly(path, contentType string, hdr map[string]string, n int) response {
	g.t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.http.URL, "http://"))
	if err != nil {
		g.t.Fatal(err)
	}
	defer conn.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\nContent-Length: %d\r\n", path, contentType, n)
	for k, v := range hdr {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("\r\n")
	if _, err := conn.Write([]byte(b.String())); err != nil {
		g.t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		g.t.Fatalf("no answer before the body was sent: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: body}
}

func (g *testGateway) postR(contentType string, body []byte) response {
	return g.post("/events", contentType, map[string]string{"AEP-Version": "0.1"}, body)
}

// readAll consumes the topic from the start with a plain franz-go consumer
// (no gateway code) until it holds want records or the deadline passes.
func (g *testGateway) readAll(topic string, want int) []*kgo.Record {
	g.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(g.cluster.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		g.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// endOffsets sums the end offsets of a topic: how many records it holds.
func (g *testGateway) records(topic string) int64 {
	g.t.Helper()
	ends, err := kadm.NewClient(g.client).ListEndOffsets(context.Background(), topic)
	if err != nil {
		g.t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

func rEvent(session string, seq int) string {
	return fmt.Sprintf(`{"aep":"0.1","id":"01JX9YB0AAAA%014d","type":"tool.requested","time":"2026-07-03T10:14:00.000Z","source":"aep://host-a/agent/claude-code/session/%s","agent":"claude-code","session":%q,"seq":%d,"epoch":0,"subject":"Bash","severity":"info","data":{"tool":{"name":"Bash"}}}`,
		seq, session, session, seq)
}

func dEvent(i int, session string) string {
	return fmt.Sprintf(`{"aep_version":"0.1","id":"evt_%04d","type":"task.progress","source":"agent:researcher","target":"tool:crawler","task_id":"task_01","session_id":%q,"created_at":"2026-07-09T10:00:00Z","payload":{"progress":0.5}}`, i, session)
}

func header(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

func TestIngestRSingleEventLandsAsSent(t *testing.T) {
	g := newTestGateway(t, nil)
	ev := rEvent("s_8f2c", 7)
	resp := g.postR("application/json", []byte(ev))
	if resp.status != http.StatusAccepted {
		t.Fatalf("status %d: %s", resp.status, resp.body)
	}
	body := resp.json(t)
	if body["accepted"].(float64) != 1 || body["topic"] != "aep.default.events" {
		t.Fatalf("body %s", resp.body)
	}
	recs := g.readAll("aep.default.events", 1)
	if len(recs) != 1 {
		t.Fatalf("read %d records", len(recs))
	}
	r := recs[0]
	if string(r.Value) != ev {
		t.Errorf("stored bytes differ:\n got %s\nwant %s", r.Value, ev)
	}
	if string(r.Key) != "s_8f2c" {
		t.Errorf("key %q", r.Key)
	}
	if want := partitioning.Partition(r.Key, g.parts); r.Partition != want {
		t.Errorf("partition %d, murmur2 says %d", r.Partition, want)
	}
	for k, v := range map[string]string{"aep-dialect": "R", "aep-type": "tool.requested", "aep-session": "s_8f2c",
		"aep-seq": "7", "aep-epoch": "0", "aep-agent": "claude-code", "aep-subject": "Bash", "aep-severity": "info"} {
		if got := header(r, k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	pos := body["positions"].([]any)[0].(map[string]any)
	if int32(pos["partition"].(float64)) != r.Partition || int64(pos["offset"].(float64)) != r.Offset {
		t.Errorf("reported position %v, record at %d/%d", pos, r.Partition, r.Offset)
	}
}

func TestIngestRBatchKeepsOrder(t *testing.T) {
	g := newTestGateway(t, nil)
	var b strings.Builder
	for i := 0; i < 50; i++ {
		b.WriteString(rEvent("s_order", i))
		b.WriteString("\r\n")
	}
	b.WriteString("\n\n") // trailing blank lines are not events
	resp := g.postR("application/x-ndjson", []byte(b.String()))
	if resp.status != http.StatusAccepted {
		t.Fatalf("status %d: %s", resp.status, resp.body)
	}
	recs := g.readAll("aep.default.events", 50)
	if len(recs) != 50 {
		t.Fatalf("read %d records", len(recs))
	}
	for i, r := range recs {
		if header(r, "aep-seq") != fmt.Sprint(i) {
			t.Fatalf("record %d has seq %s: order lost", i, header(r, "aep-seq"))
		}
	}
}

func TestIngestRRejectsWithoutWriting(t *testing.T) {
	g := newTestGateway(t, func(c *Config) {
		c.Limits = Limits{MaxBodyBytes: 64 << 10, MaxEventBytes: 4 << 10, MaxBatchEvents: 10}
	})
	good := rEvent("s1", 1)
	cases := []struct {
		name     string
		ctype    string
		version  string
		body     string
		status   int
		code     string
		line     float64
		noHeader bool
		// headersOnly sends the headers (with the body's Content-Length)
		// and reads the answer without sending the body: a body declared
		// over the limit is refused before it is read, and a client still
		// writing it would race the connection's close (a reset).
		headersOnly bool
	}{
		{name: "missing version header", ctype: "application/json", noHeader: true, body: good, status: 426},
		{name: "unsupported major", ctype: "application/json", version: "1.0", body: good, status: 426},
		{name: "wrong content type", ctype: "text/plain", version: "0.1", body: good, status: 415, code: "invalid-event"},
		{name: "malformed json", ctype: "application/json", version: "0.1", body: `{"aep":"0.1",`, status: 400, code: "invalid-event", line: 1},
		{name: "truncated ndjson line", ctype: "application/x-ndjson", version: "0.1",
			body: good + "\n" + rEvent("s1", 2) + "\n" + good[:40] + "\n", status: 400, code: "invalid-event", line: 3},
		{name: "invalid attribute", ctype: "application/x-ndjson", version: "0.1",
			body: good + "\n" + strings.Replace(good, `"severity":"info"`, `"severity":"loud"`, 1), status: 400, code: "invalid-event", line: 2},
		{name: "null attribute", ctype: "application/json", version: "0.1",
			body: strings.Replace(good, `"subject":"Bash"`, `"subject":null`, 1), status: 400, code: "invalid-event", line: 1},
		{name: "invalid utf-8", ctype: "application/json", version: "0.1",
			body: strings.Replace(good, "Bash", "Ba\xffsh", 1), status: 400, code: "invalid-event", line: 1},
		{name: "depth bomb", ctype: "application/json", version: "0.1",
			body: strings.Replace(good, `"data":{`, `"data":{"x":`+strings.Repeat("[", 2000)+strings.Repeat("]", 2000)+",", 1), status: 413, code: "limit-exceeded", line: 1},
		{name: "event over limit", ctype: "application/x-ndjson", version: "0.1",
			body: good + "\n" + strings.Replace(good, "Bash", strings.Repeat("B", 5000), 1), status: 413, code: "limit-exceeded", line: 2},
		{name: "batch over count", ctype: "application/x-ndjson", version: "0.1",
			body: strings.Repeat(good+"\n", 11), status: 413, code: "limit-exceeded", line: 11},
		{name: "body over limit", ctype: "application/x-ndjson", version: "0.1",
			body: strings.Repeat(" ", 70<<10) + good, status: 413, code: "limit-exceeded", headersOnly: true},
		{name: "d event on r endpoint", ctype: "application/json", version: "0.1", body: dEvent(1, "s"), status: 400, code: "invalid-event", line: 1},
		{name: "empty body", ctype: "application/json", version: "0.1", body: "  ", status: 400, code: "invalid-event"},
		{name: "array on r endpoint", ctype: "application/json", version: "0.1", body: "[" + good + "]", status: 400, code: "invalid-event"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hdr := map[string]string{"AEP-Version": c.version}
			if c.noHeader {
				hdr = nil
			}
			var resp response
			if c.headersOnly {
				resp = g.postHeadersOnly("/events", c.ctype, hdr, len(c.body))
			} else {
				resp = g.post("/events", c.ctype, hdr, []byte(c.body))
			}
			if resp.status != c.status {
				t.Fatalf("status %d, want %d: %s", resp.status, c.status, resp.body)
			}
			body := resp.json(t)
			if c.status == 426 {
				if v, _ := body["versions"].([]any); len(v) == 0 || v[0] != "0.1" {
					t.Fatalf("426 body %s", resp.body)
				}
				return
			}
			if body["error"] != c.code {
				t.Errorf("error %v, want %s: %s", body["error"], c.code, resp.body)
			}
			if d, _ := body["detail"].(string); d == "" {
				t.Errorf("no detail: %s", resp.body)
			}
			if c.line != 0 && body["line"] != c.line {
				t.Errorf("line %v, want %v: %s", body["line"], c.line, resp.body)
			}
		})
	}
	if n := g.records("aep.default.events"); n != 0 {
		t.Fatalf("%d records were written by rejected requests", n)
	}
}

func TestIngestDPartialBatch(t *testing.T) {
	g := newTestGateway(t, nil)
	bad := strings.Replace(dEvent(1, "s"), `"type":"task.progress"`, `"type":"Task"`, 1)
	noVersion := strings.Replace(dEvent(2, "s"), `"aep_version":"0.1",`, "", 1)
	body := dEvent(0, "sess_a") + "\n" + bad + "\n" + noVersion + "\n" + dEvent(3, "sess_b") + "\n"
	resp := g.post("/aep/events", "application/x-ndjson", nil, []byte(body))
	if resp.status != http.StatusAccepted {
		t.Fatalf("status %d: %s", resp.status, resp.body)
	}
	var out dIngestResponse
	if err := json.Unmarshal(resp.body, &out); err != nil {
		t.Fatal(err)
	}
	if out.Accepted != 2 || out.Rejected != 2 || len(out.Errors) != 2 {
		t.Fatalf("summary %s", resp.body)
	}
	if out.Errors[0].EventIndex != 1 || out.Errors[1].EventIndex != 2 {
		t.Errorf("error indexes %s", resp.body)
	}
	for _, e := range out.Errors {
		if e.Error.Code == "" || e.Error.Message == "" || e.Error.Retryable {
			t.Errorf("error object %+v", e.Error)
		}
	}
	if len(out.Positions) != 2 || out.Positions[0].EventIndex != 0 || out.Positions[1].EventIndex != 3 {
		t.Errorf("positions %s", resp.body)
	}
	recs := g.readAll("aep.default.events", 2)
	if len(recs) != 2 {
		t.Fatalf("read %d records", len(recs))
	}
	got := map[string]*kgo.Record{}
	for _, r := range recs {
		got[header(r, "aep-id")] = r
	}
	r := got["evt_0000"]
	if r == nil || string(r.Value) != dEvent(0, "sess_a") || string(r.Key) != "sess_a" || header(r, "aep-dialect") != "D" ||
		header(r, "aep-target") != "tool:crawler" || header(r, "aep-task") != "task_01" {
		t.Fatalf("record %+v", r)
	}
}

func TestIngestDJSONArrayAndErrors(t *testing.T) {
	g := newTestGateway(t, func(c *Config) { c.Limits = Limits{MaxBatchEvents: 3} })
	arr := "[" + dEvent(0, "s") + ",\n " + dEvent(1, "s") + "]"
	resp := g.post("/aep/events", "application/json", nil, []byte(arr))
	if resp.status != http.StatusAccepted || resp.json(t)["accepted"].(float64) != 2 {
		t.Fatalf("array: %d %s", resp.status, resp.body)
	}
	resp = g.post("/aep/events", "application/json; charset=utf-8", nil, []byte(dEvent(5, "s")))
	if resp.status != http.StatusAccepted || resp.json(t)["accepted"].(float64) != 1 {
		t.Fatalf("single: %d %s", resp.status, resp.body)
	}
	cases := []struct {
		name, ctype, body string
		status            int
		code              string
	}{
		{"not json at all", "application/x-ndjson", "hello\nworld\n", 400, ""},
		{"one truncated line refuses the body", "application/x-ndjson", dEvent(0, "s") + "\n" + `{"aep_version":"0.1","id":` + "\n", 400, ""},
		{"unterminated array", "application/json", "[" + dEvent(0, "s"), 400, "invalid_envelope"},
		{"too many", "application/x-ndjson", strings.Repeat(dEvent(0, "s")+"\n", 4), 413, "protocol_error"},
		{"wrong type", "application/xml", "<x/>", 415, "protocol_error"},
		{"r event on d endpoint", "application/json", rEvent("s", 1), 202, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := g.post("/aep/events", c.ctype, nil, []byte(c.body))
			if resp.status != c.status {
				t.Fatalf("status %d, want %d: %s", resp.status, c.status, resp.body)
			}
			body := resp.json(t)
			if c.code != "" {
				e, _ := body["error"].(map[string]any)
				if e["code"] != c.code || e["message"] == "" {
					t.Fatalf("error %s", resp.body)
				}
			}
			if c.status == 202 && (body["accepted"].(float64) != 0 || body["rejected"].(float64) != 1) {
				t.Fatalf("summary %s", resp.body)
			}
		})
	}
}

func TestAuthAndTenants(t *testing.T) {
	ks, err := ParseKeyStore(strings.NewReader("# keys\nacme sha256:" + sha256hex("k-acme") + "\nglobex sha256:" + sha256hex("k-globex") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGateway(t, func(c *Config) { c.Keys = ks })
	resp := g.post("/aep/events", "application/json", nil, []byte(dEvent(0, "s")))
	if resp.status != 401 || resp.json(t)["error"].(map[string]any)["code"] != aep.CodeDUnauthorized {
		t.Fatalf("no token: %d %s", resp.status, resp.body)
	}
	resp = g.post("/events", "application/json", map[string]string{"AEP-Version": "0.1", "Authorization": "Bearer wrong"}, []byte(rEvent("s", 1)))
	if resp.status != 401 || resp.json(t)["error"] != aep.CodeRUnauthorized {
		t.Fatalf("wrong token: %d %s", resp.status, resp.body)
	}
	resp = g.post("/aep/events", "application/json", map[string]string{"Authorization": "Bearer k-globex"}, []byte(dEvent(0, "s")))
	if resp.status != 202 || resp.json(t)["topic"] != "aep.globex.events" {
		t.Fatalf("globex: %d %s", resp.status, resp.body)
	}
	// ?access_token= is for the streaming GETs only (docs/security.md).
	resp = g.post("/aep/events?access_token=k-acme", "application/json", nil, []byte(dEvent(1, "s")))
	if resp.status != 401 {
		t.Fatalf("POST with a query token: %d %s", resp.status, resp.body)
	}
	resp = g.post("/aep/events", "application/json", map[string]string{"Authorization": "Bearer k-acme"}, []byte(dEvent(1, "s")))
	if resp.status != 202 || resp.json(t)["topic"] != "aep.acme.events" {
		t.Fatalf("acme: %d %s", resp.status, resp.body)
	}
	if g.records("aep.acme.events") != 1 || g.records("aep.globex.events") != 1 {
		t.Fatal("events crossed tenants")
	}
}

func TestKafkaDownIsReportedNotHidden(t *testing.T) {
	g := newTestGateway(t, func(c *Config) { c.WriteTimeout = 2 * time.Second; c.ReadyInterval = 100 * time.Millisecond })
	// Provision the tenant while the broker is up, then take it away.
	if resp := g.postR("application/json", []byte(rEvent("s", 0))); resp.status != 202 {
		t.Fatalf("warm-up: %d %s", resp.status, resp.body)
	}
	g.cluster.Close()
	resp := g.postR("application/x-ndjson", []byte(rEvent("s", 1)+"\n"+rEvent("s", 2)+"\n"))
	if resp.status != http.StatusServiceUnavailable {
		t.Fatalf("status %d: %s", resp.status, resp.body)
	}
	body := resp.json(t)
	if body["accepted"].(float64) != 0 || len(body["failed"].([]any)) != 2 || resp.header.Get("Retry-After") == "" {
		t.Fatalf("body %s", resp.body)
	}
	resp = g.post("/aep/events", "application/json", nil, []byte(dEvent(0, "s")))
	if resp.status != http.StatusServiceUnavailable {
		t.Fatalf("D status %d: %s", resp.status, resp.body)
	}
	e := resp.json(t)["errors"].([]any)[0].(map[string]any)["error"].(map[string]any)
	if e["code"] != aep.CodeDInternalError || e["retryable"] != true {
		t.Fatalf("D error %v", e)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := http.Get(g.http.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz still ready with the broker gone")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestHealthDiscoveryMetrics(t *testing.T) {
	g := newTestGateway(t, nil)
	get := func(path string) (int, string) {
		r, err := http.Get(g.http.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	if st, _ := get("/healthz"); st != 200 {
		t.Fatalf("healthz %d", st)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ := get("/readyz")
		if st == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range []string{"/events", "/.well-known/aep"} {
		st, body := get(p)
		var d discovery
		if st != 200 || json.Unmarshal([]byte(body), &d) != nil || len(d.AEP) == 0 || d.AEP[0] != "0.1" || d.Endpoints["events"] != "/events" {
			t.Fatalf("%s: %d %s", p, st, body)
		}
		if _, ok := d.Endpoints["stream"]; ok {
			t.Fatalf("%s advertises a stream endpoint the gateway does not serve", p)
		}
	}
	g.postR("application/json", []byte(rEvent("s", 1)))
	g.postR("application/json", []byte(`{}`))
	_, m := get("/metrics")
	for _, want := range []string{
		`aep_ingest_events_total{dialect="R",reason="",result="accepted"} 1`,
		`aep_ingest_events_total{dialect="R",reason="invalid",result="rejected"} 1`,
		`aep_produce_latency_seconds_count{dialect="R"} 1`,
		`aep_http_requests_total{code="202",method="POST",route="/events"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
