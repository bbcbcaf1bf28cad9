package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// otlpReceiver is a small OTLP/HTTP trace collector: it decodes the
// protobuf export requests the gateway's exporter sends to /v1/traces and
// keeps their spans.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want POST /v1/traces application/x-protobuf", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	var req coltrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			o.spans = append(o.spans, ss.GetSpans()...)
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (o *otlpReceiver) snapshot() []*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*tracepb.Span(nil), o.spans...)
}

func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// trace is the spans of one trace id, by span id.
type traceSpans map[string]*tracepb.Span

func byTrace(spans []*tracepb.Span, traceID []byte) traceSpans {
	out := traceSpans{}
	for _, s := range spans {
		if string(s.GetTraceId()) == string(traceID) {
			out[string(s.GetSpanId())] = s
		}
	}
	return out
}

// named returns the spans of the trace whose name is name.
func (ts traceSpans) named(name string) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range ts {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

// parent is s's parent in the trace, or nil.
func (ts traceSpans) parent(s *tracepb.Span) *tracepb.Span { return ts[string(s.GetParentSpanId())] }

// openSSE opens a D stream and waits for its opening comment.
func openSSE(t *testing.T, ctx context.Context, url string) *bufio.Scanner {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "stream open") {
			return sc
		}
	}
	t.Fatalf("GET %s: no stream open comment", url)
	return nil
}

// One published event yields one trace: the ingest request, the event's
// ingest span, the Kafka publish and receive (kotel), and one delivery span
// per stream that received it (two SSE streams, a WebSocket one, a durable
// subscription's SSE stream and an at_least_once WebSocket subscription),
// each the child of the one before, and the durable consumer's ack. An R event
// carrying its own traceparent is ingested in its emitter's trace, linked to
// the request's. Real sockets, the embedded broker, an OTLP/HTTP receiver.
func TestTraceFollowsOneEventFromIngestToTwoStreams(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // export every 100 ms
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	defer collector.Close()
	base, logs := startGatewayLog(t, "--otlp-endpoint", collector.URL)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	streams := []*bufio.Scanner{openSSE(t, ctx, base+"/aep/events?types=task.*"), openSSE(t, ctx, base+"/aep/events?types=task.progress")}
	ws := gatewaytest.DialWSD(t, gatewaytest.WSURL(base, "/aep"), gatewaytest.WSOptions{Buffer: 16})
	defer ws.Close()
	ws.MustSubscribe("evt_trace_sub", `{"types":["task.*"]}`)
	wsDurable := gatewaytest.DialWSD(t, gatewaytest.WSURL(base, "/aep"), gatewaytest.WSOptions{Buffer: 16})
	defer wsDurable.Close()
	wsDurable.MustSubscribe("evt_trace_sub_d", `{"types":["task.*"],"delivery_mode":"at_least_once"}`)
	// A durable subscription, its stream, and later its consumer's ack.
	resp := do(t, http.MethodPost, base+"/aep/subscriptions", "application/json", `{"types":["task.*"]}`)
	var created struct {
		ID string `json:"subscription_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&created); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /aep/subscriptions: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	streams = append(streams, openSSE(t, ctx, base+"/aep/subscriptions/"+created.ID+"/stream"))

	const id = "evt_traced_01"
	dEvent := `{"aep_version":"0.1","id":"` + id + `","type":"task.progress","source":"agent:r","session_id":"sess_t","created_at":"2026-07-09T10:00:00Z","payload":{}}`
	resp = do(t, http.MethodPost, base+"/aep/events", "application/x-ndjson", dEvent)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /aep/events: %d %s", resp.StatusCode, b)
	}
	for i, sc := range streams {
		got := false
		for !got && sc.Scan() {
			got = strings.Contains(sc.Text(), id)
		}
		if !got {
			t.Fatalf("stream %d did not deliver %s", i, id)
		}
	}
	for _, w := range []*gatewaytest.WSD{ws, wsDurable} {
		if ev := w.Event(); ev.ID != id {
			t.Fatalf("a WebSocket stream delivered %s", ev.Raw)
		}
	}
	resp = do(t, http.MethodPost, base+"/aep/subscriptions/"+created.ID+"/acks", "application/json",
		`[{"type":"event.acknowledged","payload":{"acknowledged_event_id":"`+id+`"}}]`)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"applied"`) {
		t.Fatalf("ack: %d %s", resp.StatusCode, b)
	}

	// The emitter's own trace context, carried in the R event.
	const emitterTrace, emitterSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	rEvent := `{"aep":"0.1","id":"01JX9YB0AAAA0000000000TRCE","type":"session.started","time":"2026-07-03T10:14:00Z","source":"aep://h/agent/a/session/s1","agent":"a","session":"s1","seq":0,"epoch":0,` +
		`"traceparent":"00-` + emitterTrace + `-` + emitterSpan + `-01","data":{}}`
	resp = do(t, http.MethodPost, base+"/events", "application/json", rEvent, "AEP-Version", "0.1")
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /events: %d %s", resp.StatusCode, b)
	}

	var ts traceSpans
	var ingest, rIngest *tracepb.Span
	ok := gatewaytest.Eventually(20*time.Second, 20*time.Millisecond, func() bool {
		spans := recv.snapshot()
		ingest, rIngest = nil, nil
		for _, s := range spans {
			switch {
			case s.GetName() == "aep.ingest.event" && attr(s, "aep.event.id") == id:
				ingest = s
			case s.GetName() == "aep.ingest.event" && attr(s, "aep.event.id") == "01JX9YB0AAAA0000000000TRCE":
				rIngest = s
			}
		}
		if ingest == nil || rIngest == nil {
			return false
		}
		ts = byTrace(spans, ingest.GetTraceId())
		return len(ts.named("aep.deliver")) >= 5 && len(ts.named("aep.ack")) == 1 && ts.parent(ingest) != nil
	})
	if !ok {
		t.Fatalf("no complete trace: ingest span %v, R ingest span %v, trace %v", ingest, rIngest, ts)
	}

	// request -> event -> publish -> receive -> deliver, one trace.
	req := ts.parent(ingest)
	if req == nil || req.GetName() != "POST /aep/events" || req.GetKind() != tracepb.Span_SPAN_KIND_SERVER || attr(req, "http.route") != "/aep/events" {
		t.Fatalf("the event's ingest span's parent is %v, want the POST /aep/events server span", req)
	}
	// The request's access log line leads to its trace.
	traceID := hex.EncodeToString(req.GetTraceId())
	if !slices.ContainsFunc(logs.lines(), func(l map[string]any) bool {
		return l["message"] == "request" && l["route"] == "/aep/events" && l["trace_id"] == traceID
	}) {
		t.Errorf("no access log line for POST /aep/events with trace_id %s", traceID)
	}
	streamsSeen := map[string]int{}
	for _, d := range ts.named("aep.deliver") {
		recvSpan := ts.parent(d)
		if recvSpan == nil || !strings.HasSuffix(recvSpan.GetName(), " receive") {
			t.Fatalf("delivery span's parent is %v, want the Kafka receive span", recvSpan)
		}
		pub := ts.parent(recvSpan)
		if pub == nil || !strings.HasSuffix(pub.GetName(), " publish") || pub.GetKind() != tracepb.Span_SPAN_KIND_PRODUCER {
			t.Fatalf("receive span's parent is %v, want the Kafka publish span", pub)
		}
		if ts.parent(pub) != ingest {
			t.Fatalf("publish span's parent is %v, want the event's ingest span", ts.parent(pub))
		}
		streamsSeen[attr(d, "aep.stream")]++
		if attr(d, "aep.tenant") != "default" {
			t.Errorf("delivery span attributes: %v", d.GetAttributes())
		}
	}
	if streamsSeen["sse"] != 2 || streamsSeen["ws"] != 1 || streamsSeen["sse-durable"] != 1 || streamsSeen["ws-durable"] != 1 || len(streamsSeen) != 4 {
		t.Fatalf("delivery spans by stream %v, want one per stream: 2 SSE, 1 WebSocket, 1 durable SSE, 1 durable WebSocket", streamsSeen)
	}
	// The ack: child of the durable stream's Kafka receive span.
	ack := ts.named("aep.ack")[0]
	if p := ts.parent(ack); p == nil || !strings.HasSuffix(p.GetName(), " receive") || attr(ack, "aep.ack.outcome") != "applied" {
		t.Fatalf("ack span %v under %v", ack, p)
	}

	// An event published over a WebSocket: its ingest span is the child of
	// the message's span.
	const wsID = "evt_traced_ws"
	wsEmitter := gatewaytest.DialWSD(t, gatewaytest.WSURL(base, "/aep"), gatewaytest.WSOptions{Buffer: 16})
	defer wsEmitter.Close()
	wsEmitter.Send(`{"aep_version":"0.1","id":"` + wsID + `","type":"note.added","source":"agent:r","session_id":"sess_t","created_at":"2026-07-09T10:00:00Z","payload":{}}`)
	if m := wsEmitter.Next(); m.Type != "event.acknowledged" || m.Str("acknowledged_event_id") != wsID {
		t.Fatalf("WebSocket publish answer: %s", m.Raw)
	}
	// Spans are exported as they end: the message's after its events'.
	var wsIngest, msg *tracepb.Span
	if !gatewaytest.Eventually(10*time.Second, 20*time.Millisecond, func() bool {
		spans := recv.snapshot()
		for _, s := range spans {
			if s.GetName() == "aep.ingest.event" && attr(s, "aep.event.id") == wsID {
				wsIngest = s
			}
		}
		if wsIngest != nil {
			msg = byTrace(spans, wsIngest.GetTraceId()).parent(wsIngest)
		}
		return msg != nil
	}) || msg.GetName() != "aep.ingest.message" {
		t.Fatalf("the WebSocket event's ingest span %v has parent %v, want aep.ingest.message", wsIngest, msg)
	}

	// The R event: its emitter's trace, its emitter's span as parent, a link
	// to the request's span; the Kafka publish follows it there.
	if hex.EncodeToString(rIngest.GetTraceId()) != emitterTrace || hex.EncodeToString(rIngest.GetParentSpanId()) != emitterSpan {
		t.Fatalf("R ingest span in trace %x under %x, want %s under %s", rIngest.GetTraceId(), rIngest.GetParentSpanId(), emitterTrace, emitterSpan)
	}
	if len(rIngest.GetLinks()) != 1 {
		t.Fatalf("R ingest span links %v, want the request's span", rIngest.GetLinks())
	}
	rts := byTrace(recv.snapshot(), rIngest.GetTraceId())
	if !gatewaytest.Eventually(10*time.Second, 20*time.Millisecond, func() bool {
		rts = byTrace(recv.snapshot(), rIngest.GetTraceId())
		return len(rts.named("aep.default.events publish")) == 1
	}) {
		t.Fatalf("no publish span in the emitter's trace: %v", rts)
	}
	link := rIngest.GetLinks()[0]
	var lreq *tracepb.Span
	if !gatewaytest.Eventually(10*time.Second, 20*time.Millisecond, func() bool {
		lreq = byTrace(recv.snapshot(), link.GetTraceId())[string(link.GetSpanId())]
		return lreq != nil
	}) || lreq.GetName() != "POST /events" {
		t.Fatalf("R ingest span links to %v, want the POST /events server span", lreq)
	}
}
