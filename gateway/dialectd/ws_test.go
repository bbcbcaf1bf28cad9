package dialectd_test

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

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/dialectd"
	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// wsEnv is a gateway on kfake with the D WebSocket binding mounted at /aep
// behind the gateway's authentication, as the binary mounts it.
type wsEnv struct {
	t   testing.TB
	url string // http://...
	h   *dialectd.WSHandler
	eng *engine.Engine
	dc  *durable.Cluster
}

func newWSEnv(t *testing.T, cfg dialectd.WSConfig) *wsEnv {
	t.Helper()
	e, _ := newWSEnvOn(t, cfg, nil, nil)
	return e
}

// newWSEnvOn is newWSEnv with the engine's metrics in reg (nil: none) and
// more handlers mounted by mount (nil: none).
func newWSEnvOn(t testing.TB, cfg dialectd.WSConfig, reg prometheus.Registerer, mount func(*gatewaytest.Stack, *durable.Cluster)) (*wsEnv, *gatewaytest.Stack) {
	t.Helper()
	return newWSEnvGW(t, cfg, reg, mount, nil)
}

// newWSEnvGW is newWSEnvOn with the gateway's configuration changed by gw
// (nil: none).
func newWSEnvGW(t testing.TB, cfg dialectd.WSConfig, reg prometheus.Registerer, mount func(*gatewaytest.Stack, *durable.Cluster), gw func(*gateway.Config)) (*wsEnv, *gatewaytest.Stack) {
	t.Helper()
	// the in-process broker under -race beside other packages' tests can
	// take longer than the 3 s production bound to acknowledge a produce
	// (CI: 80 of 192 events of one request refused after 3 s)
	st := gatewaytest.New(t, gatewaytest.Options{Config: func(c *gateway.Config) {
		c.ProduceTimeout = 30 * time.Second
		if gw != nil {
			gw(c)
		}
	}})
	srv, kr := st.Server, st.Keyring
	eng, err := engine.NewEngine(engine.Config{ClientOpts: []kgo.Opt{st.Seeds, kgo.FetchMaxWait(200 * time.Millisecond)}, Topics: st.Provisioner, Logger: zerolog.New(io.Discard), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger.GetLevel() == zerolog.TraceLevel { // the zero Logger
		cfg.Logger = zerolog.New(io.Discard)
	}
	dc := dialectd.NewTestDurable(t, eng, reg, st.Seeds, kgo.FetchMaxWait(200*time.Millisecond))
	h := dialectd.NewWSHandler(eng, dc, kr, srv.IngestFunc(aep.DialectD), cfg)
	srv.Mount(aep.DialectD, "/aep", h)
	if mount != nil {
		mount(st, dc)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		hs.CloseClientConnections()
		hs.Close()
		dc.Close()
		eng.Close()
	})
	return &wsEnv{t: t, url: hs.URL, h: h, eng: eng, dc: dc}, st
}

func (e *wsEnv) wsURL() string { return gatewaytest.WSURL(e.url, "/aep") }

// wsOptions are the client options of these tests: read-ahead room, and
// messages up to 4 MiB.
var wsOptions = gatewaytest.WSOptions{Buffer: 1024, ReadLimit: 4 << 20}

// ingestHTTP posts events through the HTTP ingest endpoint.
func (e *wsEnv) ingestHTTP(events ...string) {
	e.t.Helper()
	resp, err := http.Post(e.url+"/aep/events", "application/x-ndjson", strings.NewReader(strings.Join(events, "\n")+"\n"))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted || !bytes.Contains(b, fmt.Appendf(nil, `"accepted":%d`, len(events))) {
		e.t.Fatalf("ingest: %d %s", resp.StatusCode, b)
	}
}

func wsEvent(id, typ, source string) string {
	return fmt.Sprintf(`{"aep_version":"0.1","id":%q,"type":%q,"source":%q,"target":"agent:researcher","session_id":"sess_01","created_at":"2026-07-09T10:00:00Z","payload":{"n":%q}}`, id, typ, source, id)
}

func wsControl(id, typ, payload string) string {
	return fmt.Sprintf(`{"aep_version":"0.1","id":%q,"type":%q,"source":"agent:researcher","target":"harness:aep","session_id":"sess_01","created_at":"2026-07-09T10:00:00Z","payload":%s}`, id, typ, payload)
}

// dial connects with the aep-0.1 subprotocol without opening a session.
func (e *wsEnv) dial() *gatewaytest.WSD {
	e.t.Helper()
	o := wsOptions
	o.Subprotocols = []string{dialectd.WSSubprotocol}
	w := &gatewaytest.WSD{WSConn: gatewaytest.DialWS(e.t, e.wsURL(), o)}
	if p := w.C.Subprotocol(); p != dialectd.WSSubprotocol {
		e.t.Fatalf("subprotocol %q", p)
	}
	return w
}

// open dials and opens a session, checking session.ready.
func (e *wsEnv) open() *gatewaytest.WSD {
	e.t.Helper()
	return gatewaytest.DialWSD(e.t, e.wsURL(), wsOptions)
}

func TestWSDSessionReady(t *testing.T) {
	e := newWSEnv(t, dialectd.WSConfig{MaxMessageBytes: 100000, Heartbeat: 20 * time.Second, ReplayWindow: 7 * 24 * time.Hour})
	w := e.dial()
	w.Send(wsControl("evt_open", "session.opened", `{"session_id":"sess_42","version":"0.1"}`))
	m := w.Next()
	if m.Type != "session.ready" || !strings.HasPrefix(m.ID, "evt_") || len(m.ID) != 30 || m.Source != "gateway:aep-gateway" || m.SessionID != "sess_42" {
		t.Fatalf("session.ready envelope: %s", m.Raw)
	}
	var ready struct {
		Payload struct {
			SessionID    string `json:"session_id"`
			Capabilities struct {
				Protocol       string   `json:"protocol"`
				AEPVersion     string   `json:"aep_version"`
				Transports     []string `json:"transports"`
				DeliveryModes  []string `json:"delivery_modes"`
				MaxPayloadSize int      `json:"max_payload_size"`
				Heartbeat      int64    `json:"heartbeat_interval_ms"`
				Delivery       struct {
					DeadLetters  bool  `json:"dead_letter_support"`
					ReplayWindow int64 `json:"replay_window_ms"`
				} `json:"delivery"`
			} `json:"capabilities"`
		} `json:"payload"`
		CreatedAt string `json:"created_at"`
	}
	if err := json.Unmarshal(m.Raw, &ready); err != nil {
		t.Fatal(err)
	}
	c := ready.Payload.Capabilities
	if ready.Payload.SessionID != "sess_42" || c.Protocol != "aep" || c.AEPVersion != "0.1" ||
		fmt.Sprint(c.Transports) != "[websocket sse]" || fmt.Sprint(c.DeliveryModes) != "[best_effort at_least_once replayable]" ||
		c.MaxPayloadSize != 100000 || c.Heartbeat != 20000 ||
		!c.Delivery.DeadLetters || c.Delivery.ReplayWindow != 7*24*3600*1000 { // reliability.md's durability declaration
		t.Fatalf("capabilities: %s", m.Raw)
	}
	if _, err := time.Parse(time.RFC3339Nano, ready.CreatedAt); err != nil {
		t.Fatalf("created_at: %v", err)
	}
	// capabilities.requested is answered at any time.
	w.Send(wsControl("evt_cap", "capabilities.requested", `{}`))
	if m := w.Next(); m.Type != "capabilities.declared" || m.Str("protocol") != "aep" || m.CausationID != "evt_cap" {
		t.Fatalf("capabilities.declared: %s", m.Raw)
	}
	// session.heartbeat is ignored, a second session.opened refused.
	w.Send(wsControl("evt_hb", "session.heartbeat", `{"session_id":"sess_42"}`))
	w.Send(wsControl("evt_open2", "session.opened", `{"session_id":"sess_43","version":"0.1"}`))
	if m := w.Next(); m.Type != "event.rejected" || m.CausationID != "evt_open2" || m.ErrCode() != "protocol_error" {
		t.Fatalf("second session.opened: %s", m.Raw)
	}
	w.Send(wsControl("evt_close", "session.closed", `{"session_id":"sess_42","reason":"done"}`))
	if st := w.Closed(); st != websocket.StatusNormalClosure {
		t.Fatalf("close status %d, want 1000", st)
	}
}

// TestWSDSubscriptionSeed000 runs the examples of seed 000 (subscription.md).
func TestWSDSubscriptionSeed000(t *testing.T) {
	e := newWSEnv(t, dialectd.WSConfig{})
	w := e.open()
	for i, tc := range []struct {
		filter, answer, msg string
	}{
		{`{"types":["memory.*"],"target":"agent:researcher"}`, "subscription.created", ""},
		{`{"types":["memory.*","context.*"],"source":["memory:main"],"target":"agent:researcher","topic":"tasks.task_01","session_id":"sess_01","conversation_id":"conv_01","task_id":"task_01"}`, "subscription.created", ""},
		{`{"types":"*"}`, "subscription.created", ""},
		{`{}`, "subscription.rejected", "subscription must include at least one filter criterion"},
		{`{"session_id":"sess_01","task_id":"task_01"}`, "subscription.rejected", "at least one of types, source, target or topic"},
		{`{"types":[]}`, "subscription.rejected", "types"},
		{`{"types":[1]}`, "subscription.rejected", "types"},
		{`"memory.*"`, "subscription.rejected", "object"},
		{`{"types":"*","delivery_mode":"exactly_once"}`, "subscription.rejected", "delivery_mode"},
		{`{"types":"*","from_cursor":"stream_01:42"}`, "subscription.rejected", "cursor"},
		{`{"types":"*","delivery_mode":"best_effort","from_cursor":"x"}`, "subscription.rejected", "from_cursor requires"},
	} {
		m := w.Subscribe(fmt.Sprintf("evt_sub_%d", i), tc.filter)
		if m.Type != tc.answer {
			t.Fatalf("%s: got %s", tc.filter, m.Raw)
		}
		id := m.Str("subscription_id")
		if !strings.HasPrefix(id, "sub_") {
			t.Fatalf("%s: subscription_id %q", tc.filter, id)
		}
		if _, ok := m.Payload["filter"].(map[string]any); !ok {
			t.Fatalf("%s: no filter object: %s", tc.filter, m.Raw)
		}
		if tc.answer == "subscription.created" {
			if v, ok := m.Payload["expires_at"]; !ok || v != nil {
				t.Fatalf("%s: expires_at: %s", tc.filter, m.Raw)
			}
			if _, err := time.Parse(time.RFC3339Nano, m.Str("created_at")); err != nil {
				t.Fatalf("%s: created_at: %s", tc.filter, m.Raw)
			}
			continue
		}
		e, _ := m.Payload["error"].(map[string]any)
		if e["code"] != "subscription_rejected" || e["retryable"] != false || !strings.Contains(fmt.Sprint(e["message"]), tc.msg) {
			t.Fatalf("%s: error %v, want message containing %q", tc.filter, e, tc.msg)
		}
	}
}

func TestWSDLiveDeliveryWithFilter(t *testing.T) {
	e := newWSEnv(t, dialectd.WSConfig{})
	w := e.open()
	sub := w.MustSubscribe("evt_s", `{"types":["task.*"],"target":"agent:researcher"}`)
	e.ingestHTTP(
		wsEvent("evt_a", "memory.fact.added", "memory:main"),
		wsEvent("evt_b", "task.started", "agent:x"),
		wsEvent("evt_c", "context.updated", "memory:main"),
		wsEvent("evt_d", "task.progress", "agent:x"),
	)
	got := map[string]uint64{}
	for range 2 {
		m := w.Event()
		if m.Delivery.Mode != "best_effort" || m.Delivery.SubscriptionID != sub || m.Str("n") != m.ID {
			t.Fatalf("delivered: %s", m.Raw)
		}
		got[m.ID] = m.Delivery.Sequence
	}
	if len(got) != 2 || got["evt_b"] == 0 || got["evt_d"] == 0 || got["evt_b"]+got["evt_d"] != 3 {
		t.Fatalf("deliveries %v, want evt_b and evt_d with sequences 1 and 2", got)
	}
	// Nothing else was delivered before this answer.
	w.Send(wsControl("evt_cap", "capabilities.requested", `{}`))
	if m := w.Next(); m.Type != "capabilities.declared" {
		t.Fatalf("unexpected message: %s", m.Raw)
	}
}

func TestWSDReplayThenLive(t *testing.T) {
	e := newWSEnv(t, dialectd.WSConfig{})
	live := e.open()
	live.MustSubscribe("evt_s", `{"types":"task.*","delivery_mode":"replayable"}`)
	for i := range 4 {
		e.ingestHTTP(wsEvent(fmt.Sprintf("evt_%d", i), "task.progress", "agent:x"))
	}
	var curs []string
	for i := range 4 {
		m := live.Event()
		if m.ID != fmt.Sprintf("evt_%d", i) || m.Delivery.Mode != "replayable" || m.Delivery.Sequence != uint64(i+1) {
			t.Fatalf("live delivery %d: %s", i, m.Raw)
		}
		curs = append(curs, m.Delivery.Cursor)
	}

	w := e.open()
	created := w.Subscribe("evt_r", fmt.Sprintf(`{"types":"task.*","from_cursor":%q}`, curs[1]))
	if created.Type != "subscription.created" || created.Str("delivery_mode") != "replayable" {
		t.Fatalf("replay subscription: %s", created.Raw)
	}
	sub := created.Str("subscription_id")
	for i := 2; i < 4; i++ {
		m := w.Event()
		if m.ID != fmt.Sprintf("evt_%d", i) || m.Delivery.Sequence != uint64(i+1) || m.Delivery.SubscriptionID != sub {
			t.Fatalf("replayed %d: %s", i, m.Raw)
		}
	}
	m := w.Next()
	if m.Type != "event.replayed" || m.Str("from_cursor") != curs[1] || m.Payload["events_replayed"] != float64(2) || m.Str("subscription_id") != sub || m.Str("to_cursor") == "" {
		t.Fatalf("event.replayed: %s", m.Raw)
	}
	toCursor := m.Str("to_cursor")
	e.ingestHTTP(wsEvent("evt_4", "task.completed", "agent:x"))
	if m := w.Event(); m.ID != "evt_4" || m.Delivery.Sequence != 5 {
		t.Fatalf("live after replay: %s", m.Raw)
	}
	// to_cursor resumes right after the replay.
	w2 := e.open()
	w2.MustSubscribe("evt_r2", fmt.Sprintf(`{"types":"task.*","from_cursor":%q}`, toCursor))
	if m := w2.Event(); m.ID != "evt_4" || m.Delivery.Sequence != 5 {
		t.Fatalf("resume from to_cursor: %s", m.Raw)
	}
	if m := w2.Next(); m.Type != "event.replayed" || m.Payload["events_replayed"] != float64(1) {
		t.Fatalf("event.replayed: %s", m.Raw)
	}
	// A cursor signed by another key is refused, never started live.
	w2.Send(wsControl("evt_bad", "subscription.requested", `{"types":"*","from_cursor":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}`))
	if m := w2.Next(); m.Type != "subscription.rejected" || m.ErrCode() != "subscription_rejected" {
		t.Fatalf("bad cursor: %s", m.Raw)
	}
}

func TestWSDCancel(t *testing.T) {
	e := newWSEnv(t, dialectd.WSConfig{})
	w := e.open()
	first := w.MustSubscribe("evt_s1", `{"types":"task.*"}`)
	w.Send(wsControl("evt_c1", "subscription.cancelled", fmt.Sprintf(`{"subscription_id":%q}`, first)))
	if m := w.Next(); m.Type != "subscription.cancelled" || m.Str("subscription_id") != first || m.CausationID != "evt_c1" {
		t.Fatalf("cancel confirmation: %s", m.Raw)
	}
	w.Send(wsControl("evt_c2", "subscription.cancelled", fmt.Sprintf(`{"subscription_id":%q}`, first)))
	if m := w.Next(); m.Type != "event.rejected" || m.ErrCode() != "subscription_error" {
		t.Fatalf("second cancel: %s", m.Raw)
	}
	second := w.MustSubscribe("evt_s2", `{"types":"task.*"}`)
	if second == first {
		t.Fatalf("subscription id %s reused", second)
	}
	e.ingestHTTP(wsEvent("evt_1", "task.started", "agent:x"))
	if m := w.Event(); m.Delivery.SubscriptionID != second {
		t.Fatalf("delivered for %s after its cancellation: %s", first, m.Raw)
	}
	w.Send(wsControl("evt_cap", "capabilities.requested", `{}`))
	if m := w.Next(); m.Type != "capabilities.declared" {
		t.Fatalf("unexpected message: %s", m.Raw)
	}
}

func TestWSDSeveralSubscriptions(t *testing.T) {
	e := newWSEnv(t, dialectd.WSConfig{MaxSubscriptions: 3})
	w := e.open()
	byType := w.MustSubscribe("evt_s1", `{"types":"task.*"}`)
	bySource := w.MustSubscribe("evt_s2", `{"source":"agent:x"}`)
	w.MustSubscribe("evt_s3", `{"topic":"nothing"}`)
	if m := w.Subscribe("evt_s4", `{"types":"*"}`); m.Type != "subscription.rejected" || !strings.Contains(fmt.Sprint(m.Payload["error"]), "too many subscriptions") {
		t.Fatalf("fourth subscription: %s", m.Raw)
	}
	e.ingestHTTP(wsEvent("evt_1", "task.started", "agent:x"), wsEvent("evt_2", "memory.fact.added", "agent:x"))
	got := map[string]string{}
	for range 3 {
		m := w.Event()
		got[m.Delivery.SubscriptionID+"/"+m.ID] = m.Delivery.Mode
		if m.Delivery.SubscriptionID == byType && m.Delivery.Sequence != 1 {
			t.Fatalf("sequence per subscription: %s", m.Raw)
		}
	}
	want := []string{byType + "/evt_1", bySource + "/evt_1", bySource + "/evt_2"}
	for _, k := range want {
		if _, ok := got[k]; !ok {
			t.Fatalf("deliveries %v, want %v", got, want)
		}
	}
}

func TestWSDPublishToAnotherConnection(t *testing.T) {
	e := newWSEnv(t, dialectd.WSConfig{})
	consumer := e.open()
	sub := consumer.MustSubscribe("evt_s", `{"types":"tool.call.*","delivery_mode":"at_least_once"}`)
	producer := e.open()
	producer.Send(wsEvent("evt_pub1", "tool.call.started", "tool:crawler"))
	if m := producer.Next(); m.Type != "event.acknowledged" || m.Str("acknowledged_event_id") != "evt_pub1" || m.CausationID != "evt_pub1" {
		t.Fatalf("publish answer: %s", m.Raw)
	}
	m := consumer.Event()
	if m.ID != "evt_pub1" || m.Source != "tool:crawler" || m.Delivery.SubscriptionID != sub || m.Delivery.Mode != "at_least_once" {
		t.Fatalf("published event delivered as %s", m.Raw)
	}
	// An invalid event is refused with the ingest endpoint's code.
	producer.Send(`{"aep_version":"0.1","id":"evt_bad","type":"Not A Type","source":"x","created_at":"2026-07-09T10:00:00Z","payload":{}}`)
	// It names the event it refuses (acknowledged_event_id, causation_id):
	// before, both were empty for an event that did not validate.
	if m := producer.Next(); m.Type != "event.rejected" || m.ErrCode() != "invalid_event_type" ||
		m.CausationID != "evt_bad" || m.Str("acknowledged_event_id") != "evt_bad" {
		t.Fatalf("invalid event answer: %s", m.Raw)
	}
	producer.Send(`{"aep_version":"0.1",`)
	if m := producer.Next(); m.Type != "event.rejected" || m.ErrCode() == "" || m.Str("acknowledged_event_id") != "" {
		t.Fatalf("malformed event answer: %s", m.Raw)
	}
	// An event-level authorization, or another tenant's tenant_id: unauthorized.
	producer.Send(`{"aep_version":"0.1","id":"evt_auth","type":"tool.call.started","source":"x","created_at":"2026-07-09T10:00:00Z","authorization":{"scheme":"weird","token":"t"},"payload":{}}`)
	if m := producer.Next(); m.Type != "event.rejected" || m.ErrCode() != "unauthorized" {
		t.Fatalf("event-level authorization answer: %s", m.Raw)
	}
	producer.Send(`{"aep_version":"0.1","id":"evt_ten","type":"tool.call.started","source":"x","created_at":"2026-07-09T10:00:00Z","tenant_id":"org_other","payload":{}}`)
	if m := producer.Next(); m.Type != "event.rejected" || m.ErrCode() != "unauthorized" {
		t.Fatalf("tenant_id answer: %s", m.Raw)
	}
	// Acknowledgements are accepted and need no answer.
	consumer.Send(wsControl("evt_ack", "event.acknowledged", `{"acknowledged_event_id":"evt_pub1"}`))
	consumer.Send(wsControl("evt_cap", "capabilities.requested", `{}`))
	if m := consumer.Next(); m.Type != "capabilities.declared" {
		t.Fatalf("after ack: %s", m.Raw)
	}
}

// at_least_once over the socket: an event not acknowledged in time comes
// again as event.redelivered + the event, then is dead-lettered.
func TestWSDAtLeastOnceRedelivers(t *testing.T) {
	e := newWSEnv(t, dialectd.WSConfig{AckPolicy: durable.AckPolicy{AckTimeout: 50 * time.Millisecond, MaxAttempts: 2, Backoff: time.Millisecond}})
	w := e.open()
	m := w.Subscribe("evt_s", `{"types":"*","delivery_mode":"at_least_once"}`)
	if m.Type != "subscription.created" || m.Str("delivery_mode") != "at_least_once" || m.Str("requested_delivery_mode") != "" || m.Str("cursor") == "" {
		t.Fatalf("at_least_once: %s", m.Raw)
	}
	e.ingestHTTP(wsEvent("evt_1", "task.started", "agent:x"))
	if d := w.Event(); d.ID != "evt_1" || d.Delivery.Mode != "at_least_once" || d.Delivery.Sequence != 1 {
		t.Fatalf("first delivery: %s", d.Raw)
	}
	if n := w.Next(); n.Type != "event.redelivered" || n.Str("original_event_id") != "evt_1" || n.Payload["attempt"] != 2.0 || n.Str("subscription_id") != m.Str("subscription_id") {
		t.Fatalf("redelivery notice: %s", n.Raw)
	}
	if d := w.Event(); d.ID != "evt_1" || d.Delivery.Sequence != 2 {
		t.Fatalf("redelivered: %s", d.Raw)
	}
	if n := w.Next(); n.Type != "event.dead_lettered" || n.Str("original_event_id") != "evt_1" || n.Payload["attempts"] != 2.0 || n.Str("subscription_id") != m.Str("subscription_id") {
		t.Fatalf("dead letter: %s", n.Raw)
	}
	// The created cursor resumes from the subscription's start.
	w2 := e.open()
	w2.MustSubscribe("evt_r", fmt.Sprintf(`{"types":"*","from_cursor":%q}`, m.Str("cursor")))
	if d := w2.Event(); d.ID != "evt_1" || d.Delivery.Sequence != 1 {
		t.Fatalf("replay from the created cursor: %s", d.Raw)
	}
}

// Acks and rejections from the socket feed the tracker: an acked event
// cannot be rejected any more; a rejected one is dead-lettered with the
// consumer's error.
func TestWSDAtLeastOnceAcksAndRejects(t *testing.T) {
	e := newWSEnv(t, dialectd.WSConfig{AckPolicy: durable.AckPolicy{AckTimeout: time.Hour}})
	w := e.open()
	w.MustSubscribe("evt_s", `{"types":"*","delivery_mode":"at_least_once"}`)
	e.ingestHTTP(wsEvent("evt_1", "task.started", "agent:x"), wsEvent("evt_2", "task.started", "agent:x"))
	w.Event()
	w.Event()
	w.Send(wsControl("evt_a1", "event.acknowledged", `{"acknowledged_event_id":"evt_1"}`))
	w.Send(wsControl("evt_a2", "event.acknowledged", `{"acknowledged_event_id":"evt_1"}`)) // duplicate: harmless
	w.Send(wsControl("evt_n1", "event.rejected", `{"acknowledged_event_id":"evt_1","error":{"code":"task_error","message":"late","retryable":false}}`))
	w.Send(wsControl("evt_n2", "event.rejected", `{"acknowledged_event_id":"evt_2","error":{"code":"tool_error","message":"cannot","retryable":false}}`))
	n := w.Next()
	le, _ := n.Payload["last_error"].(map[string]any)
	if n.Type != "event.dead_lettered" || n.Str("original_event_id") != "evt_2" || le["code"] != "tool_error" {
		t.Fatalf("dead letter of the rejected event: %s", n.Raw)
	}
}

func TestWSDBadFirstMessage(t *testing.T) {
	e := newWSEnv(t, dialectd.WSConfig{})
	for _, tc := range []struct {
		name, msg string
		binary    bool
	}{
		{"subscription first", wsControl("evt_s", "subscription.requested", `{"types":"*"}`), false},
		{"published event first", wsEvent("evt_1", "task.started", "agent:x"), false},
		{"not JSON", `hello`, false},
		{"no session_id", wsControl("evt_o", "session.opened", `{"version":"0.1"}`), false},
		{"binary frame", wsControl("evt_o", "session.opened", `{"session_id":"s","version":"0.1"}`), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := e.dial()
			typ := websocket.MessageText
			if tc.binary {
				typ = websocket.MessageBinary
			}
			if err := w.C.Write(context.Background(), typ, []byte(tc.msg)); err != nil {
				t.Fatal(err)
			}
			m := w.Next()
			if m.Type != "session.error" || m.ErrCode() != "protocol_error" {
				t.Fatalf("answer: %s", m.Raw)
			}
			if st := w.Closed(); st != websocket.StatusProtocolError {
				t.Fatalf("close status %d, want 1002", st)
			}
		})
	}
	t.Run("unsupported version", func(t *testing.T) {
		w := e.dial()
		w.Send(wsControl("evt_o", "session.opened", `{"session_id":"s","version":"0.2"}`))
		m := w.Next()
		if m.Type != "session.error" || m.ErrCode() != "unsupported_version" {
			t.Fatalf("answer: %s", m.Raw)
		}
		// versioning.md: the refusal lists the versions accepted
		if !strings.Contains(string(m.Raw), `"details":{"supported":["0.1"]}`) {
			t.Errorf("no details.supported: %s", m.Raw)
		}
		if st := w.Closed(); st != websocket.StatusProtocolError {
			t.Fatalf("close status %d, want 1002", st)
		}
	})
}

func TestWSDHandshake(t *testing.T) {
	e := newWSEnv(t, dialectd.WSConfig{})
	for _, protos := range [][]string{nil, {"aep-0.2"}, {"graphql-ws"}} {
		c, resp, err := gatewaytest.TryDialWS(e.wsURL(), gatewaytest.WSOptions{Subprotocols: protos})
		if err == nil {
			_ = c.CloseNow()
			t.Fatalf("subprotocols %v: connected", protos)
		}
		if resp == nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("subprotocols %v: %v %v", protos, resp, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if !bytes.Contains(b, []byte(`"protocol_error"`)) {
			t.Fatalf("subprotocols %v: body %s", protos, b)
		}
	}
	// Several offered, aep-0.1 among them: chosen.
	c, _, err := gatewaytest.TryDialWS(e.wsURL(), gatewaytest.WSOptions{Subprotocols: []string{"aep-0.2", "aep-0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if c.Subprotocol() != "aep-0.1" {
		t.Fatalf("subprotocol %q", c.Subprotocol())
	}
}

func TestWSDMessageTooBig(t *testing.T) {
	e := newWSEnv(t, dialectd.WSConfig{MaxMessageBytes: 1024})
	w := e.open()
	w.Send(wsControl("evt_big", "task.progress", fmt.Sprintf(`{"blob":%q}`, strings.Repeat("x", 2000))))
	if st := w.Closed(); st != websocket.StatusMessageTooBig {
		t.Fatalf("close status %d, want 1009", st)
	}
}

func TestWSDShutdown(t *testing.T) {
	// Heartbeats run during the shutdown, but slowly enough that a loaded
	// machine (race detector, 2 cores) cannot miss three pongs in a row and
	// end the session with 1001 "heartbeat timeout" before the shutdown does.
	e := newWSEnv(t, dialectd.WSConfig{Heartbeat: 500 * time.Millisecond})
	w := e.open()
	sub := w.MustSubscribe("evt_s", `{"types":"*","delivery_mode":"replayable"}`)
	e.ingestHTTP(wsEvent("evt_before_shutdown", "task.progress", "agent:a"))
	last := w.Event()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// Before the close, the subscription's end with where to resume, as a
	// dialect R client hears "closing" with its positions.
	m := w.Next()
	errObj, _ := m.Payload["error"].(map[string]any)
	if m.Type != "subscription.expired" || m.Str("subscription_id") != sub || m.Str("reason") != "shutdown" ||
		m.Str("cursor") != last.Delivery.Cursor || errObj["retryable"] != true || !strings.Contains(fmt.Sprint(errObj["message"]), "from_cursor") {
		t.Fatalf("before the close: %s; want subscription.expired of %s, reason shutdown, cursor %s", m.Raw, sub, last.Delivery.Cursor)
	}
	if st := w.Closed(); st != websocket.StatusGoingAway {
		t.Fatalf("close status %d, want 1001", st)
	}
	// New connections are refused.
	c, resp, err := gatewaytest.TryDialWS(e.wsURL(), gatewaytest.WSOptions{Subprotocols: []string{"aep-0.1"}})
	if err == nil {
		_ = c.CloseNow()
		t.Fatal("connected after shutdown")
	}
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("after shutdown: %v %v", resp, err)
	}
}

// TestWSDHeartbeatTimeout speaks WebSocket by hand so that pings go
// unanswered: the gateway must send session.error session_timeout and close
// with 1001.
func TestWSDHeartbeatTimeout(t *testing.T) {
	e := newWSEnv(t, dialectd.WSConfig{Heartbeat: 20 * time.Millisecond})
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second)) // stops a hung test only
	fmt.Fprintf(conn, "GET /aep HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: aep-0.1\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	open := wsControl("evt_open", "session.opened", `{"session_id":"sess_01","version":"0.1"}`)
	frame := []byte{0x81, 0x80 | 126, byte(len(open) >> 8), byte(len(open)), 0, 0, 0, 0} // zero mask key
	if _, err := conn.Write(append(frame, open...)); err != nil {
		t.Fatal(err)
	}
	var got []byte
	closeFrame := []byte{0x03, 0xE9} // 1001, big-endian, at the start of the close payload
	for !(bytes.Contains(got, []byte(`"session_timeout"`)) && bytes.Contains(got, append([]byte{0x88}, byte(2+len("heartbeat timeout")), closeFrame[0], closeFrame[1]))) {
		buf := make([]byte, 4096)
		n, err := br.Read(buf)
		if err != nil {
			t.Fatalf("read: %v after %q", err, got)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Contains(got, []byte(`"session.ready"`)) || bytes.Index(got, []byte(`"session.ready"`)) > bytes.Index(got, []byte(`"session_timeout"`)) {
		t.Fatalf("stream %q", got)
	}
}

// TestWSDExpiredOnEngineClose: a subscription the gateway ends on its own is
// announced with subscription.expired, and the session goes on.
func TestWSDExpiredOnEngineClose(t *testing.T) {
	e := newWSEnv(t, dialectd.WSConfig{})
	w := e.open()
	sub := w.MustSubscribe("evt_s", `{"types":"*","delivery_mode":"replayable"}`)
	e.ingestHTTP(wsEvent("evt_1", "task.started", "agent:x"))
	last := w.Event().Delivery.Cursor
	e.eng.Close()
	m := w.Next()
	if m.Type != "subscription.expired" || m.Str("subscription_id") != sub || m.Str("reason") != "shutdown" || m.Str("cursor") != last || m.ErrCode() != "subscription_error" {
		t.Fatalf("after engine close: %s", m.Raw)
	}
	w.Send(wsControl("evt_c", "subscription.cancelled", fmt.Sprintf(`{"subscription_id":%q}`, sub)))
	if m := w.Next(); m.Type != "event.rejected" {
		t.Fatalf("cancel of an expired subscription: %s", m.Raw)
	}
}

// Every subscription beyond a connection's first takes a place under the
// tenant's stream cap (issue 31: one connection held 32 catching-up
// subscriptions for the price of one stream): at the cap a further
// subscription is rejected, retryable, naming the cap, and so is a further
// connection; a cancelled subscription gives its place back.
func TestWSDSubscriptionsCountTowardTheStreamCap(t *testing.T) {
	hub := transport.NewHub(3)
	e := newWSEnv(t, dialectd.WSConfig{Hub: hub})
	w := e.open()
	w.MustSubscribe("evt_s1", `{"types":"*"}`) // rides on the connection's place
	second := w.MustSubscribe("evt_s2", `{"types":"*"}`)
	w.MustSubscribe("evt_s3", `{"types":"*"}`) // the connection and 2 more: 3
	m := w.Subscribe("evt_s4", `{"types":"*"}`)
	errObj, _ := m.Payload["error"].(map[string]any)
	if m.Type != "subscription.rejected" || errObj["retryable"] != true || !strings.Contains(fmt.Sprint(errObj["message"]), "max-streams-per-tenant") {
		t.Fatalf("a 4th subscription at a cap of 3: %s", m.Raw)
	}
	if c, resp, err := gatewaytest.TryDialWS(e.wsURL(), gatewaytest.WSOptions{Subprotocols: []string{"aep-0.1"}}); err == nil {
		_ = c.CloseNow()
		t.Fatal("a second connection was admitted at the cap")
	} else if resp == nil || resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a second connection at the cap: %v %v", resp, err)
	}
	w.Send(wsControl("evt_c", "subscription.cancelled", fmt.Sprintf(`{"subscription_id":%q}`, second)))
	if m := w.Next(); m.Type != "subscription.cancelled" {
		t.Fatalf("cancel: %s", m.Raw)
	}
	w.MustSubscribe("evt_s5", `{"types":"*"}`) // its place is free again
	w.Close()
	gatewaytest.Poll(t, "every place given back", func() bool { return hub.Open("default") == 0 })
}
