package dialectd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/dialectd"
	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// newSubsEnv is a gateway (ingest into kfake) with the durable
// subscriptions API next to it.
func newSubsEnv(t *testing.T, cfg dialectd.SubscriptionsConfig) *sseEnv {
	t.Helper()
	st := gatewaytest.New(t, gatewaytest.Options{})
	eng, err := engine.NewEngine(engine.Config{ClientOpts: []kgo.Opt{st.Seeds, kgo.FetchMaxWait(200 * time.Millisecond)}, Topics: st.Provisioner, Logger: zerolog.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	dc := dialectd.NewTestDurable(t, eng, nil, st.Seeds, kgo.FetchMaxWait(200*time.Millisecond))
	cfg.Logger = zerolog.New(io.Discard)
	h := gatewaytest.WithTenant(gateway.DevTenant, dialectd.NewSubscriptionsHandler(dc, st.Keyring, cfg))
	mux := http.NewServeMux()
	mux.Handle("/aep/subscriptions", h)
	mux.Handle("/aep/subscriptions/", h)
	dl := dialectd.NewDeadLettersHandler(dc, 0, zerolog.New(io.Discard))
	mux.Handle("/aep/dead-letters", gatewaytest.WithTenant(gateway.DevTenant, dl))
	mux.Handle("/other/dead-letters", gatewaytest.WithTenant("other", dl)) // a second tenant
	mux.Handle("/", st.Server.Handler())
	hs := httptest.NewServer(mux)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		dc.Close()
		eng.Close()
	})
	return &sseEnv{t: t, url: hs.URL, kr: st.Keyring, adm: st.Admin}
}

func (e *sseEnv) do(method, path, body string) (int, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (e *sseEnv) openPath(path string) *sseStream {
	e.t.Helper()
	s, resp := e.openURL(e.url+path, nil)
	if s == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		e.t.Fatalf("open %s: %d %s", path, resp.StatusCode, b)
	}
	return s
}

func ackBody(typ string, ids ...string) string {
	var parts []string
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf(`{"aep_version":"0.1","id":"evt_ack_%s","type":%q,"source":"agent:c","created_at":"2026-07-09T10:00:00Z","payload":{"acknowledged_event_id":%q,"error":{"code":"task_error","message":"no","retryable":false}}}`, id, typ, id))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func TestSubscriptionsDLifecycle(t *testing.T) {
	e := newSubsEnv(t, dialectd.SubscriptionsConfig{CommitInterval: 20 * time.Millisecond})
	code, b := e.do(http.MethodPost, "/aep/subscriptions", `{"type":"subscription.requested","payload":{"types":["task.*"],"delivery_mode":"at_least_once","ack_timeout_ms":3600000}}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	var created struct {
		ID           string          `json:"subscription_id"`
		Filter       json.RawMessage `json:"filter"`
		DeliveryMode string          `json:"delivery_mode"`
		AckTimeoutMS int64           `json:"ack_timeout_ms"`
		Cursor       string          `json:"cursor"`
	}
	if err := json.Unmarshal(b, &created); err != nil || !strings.HasPrefix(created.ID, "sub_") || created.DeliveryMode != "at_least_once" || created.AckTimeoutMS != 3600000 {
		t.Fatalf("created %s: %v", b, err)
	}
	if c, err := e.kr.Decode(gateway.DevTenant, created.Cursor); err != nil || len(c.Offsets) != 3 {
		t.Fatalf("created cursor %q: %v", created.Cursor, err)
	}
	// events published before the first stream opens are delivered
	var ids []string
	var evs []string
	for i := range 10 {
		id := fmt.Sprintf("evt_%02d", i)
		ids = append(ids, id)
		evs = append(evs, dEvent(id, "task.updated", fmt.Sprintf("s%d", i%3)), dEvent(id+"x", "chat.message", "s0"))
	}
	e.ingest(evs...)
	s := e.openPath("/aep/subscriptions/" + created.ID + "/stream")
	got := map[string]bool{}
	for range 10 {
		d := s.event()
		if d.Delivery.Mode != "at_least_once" || d.Type != "task.updated" {
			t.Fatalf("delivered %+v", d)
		}
		got[d.ID] = true
	}
	if len(got) != 10 {
		t.Fatalf("got %v", got)
	}
	code, b = e.do(http.MethodPost, "/aep/subscriptions/"+created.ID+"/acks", ackBody("event.acknowledged", ids[:8]...))
	if code != http.StatusOK || strings.Count(string(b), `"result":"applied"`) != 8 {
		t.Fatalf("acks: %d %s", code, b)
	}
	code, b = e.do(http.MethodPost, "/aep/subscriptions/"+created.ID+"/acks", ackBody("event.acknowledged", ids[0])+"")
	if code != http.StatusOK || !strings.Contains(string(b), `"result":"unknown"`) {
		t.Fatalf("duplicate ack: %d %s", code, b)
	}
	code, b = e.do(http.MethodPost, "/aep/subscriptions/"+created.ID+"/acks", `[{"type":"chat.message","payload":{}}]`)
	if code != http.StatusOK || !strings.Contains(string(b), `"result":"invalid"`) {
		t.Fatalf("invalid ack: %d %s", code, b)
	}
	var state struct {
		PendingAcks int  `json:"pending_acks"`
		Streaming   bool `json:"streaming"`
		Lag         int64
	}
	code, b = e.do(http.MethodGet, "/aep/subscriptions/"+created.ID, "")
	if err := json.Unmarshal(b, &state); code != http.StatusOK || err != nil || !state.Streaming || state.PendingAcks != 2 {
		t.Fatalf("state: %d %s", code, b)
	}
	s.Close()

	// reconnect: the two unacked come again, announced as attempt 2
	gatewaytest.Poll(t, "the first stream released", func() bool {
		_, b := e.do(http.MethodGet, "/aep/subscriptions/"+created.ID, "")
		return json.Unmarshal(b, &state) == nil && !state.Streaming
	})
	s2 := e.openPath("/aep/subscriptions/" + created.ID + "/stream")
	// the two unacked, each announced; across partitions in any order
	again := map[string]bool{ids[8]: true, ids[9]: true}
	for range 2 {
		m := s2.next()
		var n struct {
			Type    string `json:"type"`
			Payload struct {
				OriginalEventID string `json:"original_event_id"`
				Attempt         int    `json:"attempt"`
			} `json:"payload"`
		}
		if err := json.Unmarshal([]byte(m.Data), &n); err != nil || m.Event != "event.redelivered" || !again[n.Payload.OriginalEventID] || n.Payload.Attempt != 2 {
			t.Fatalf("redelivery notice %+v", m)
		}
		if d := s2.event(); d.ID != n.Payload.OriginalEventID {
			t.Fatalf("redelivered %+v after the notice for %s", d, n.Payload.OriginalEventID)
		}
		delete(again, n.Payload.OriginalEventID)
	}
	code, b = e.do(http.MethodPost, "/aep/subscriptions/"+created.ID+"/acks", ackBody("event.rejected", ids[9]))
	if code != http.StatusOK || !strings.Contains(string(b), `"result":"rejected"`) {
		t.Fatalf("reject: %d %s", code, b)
	}
	if m := s2.next(); m.Event != "event.dead_lettered" || !strings.Contains(m.Data, `"original_event_id":"evt_09"`) || !strings.Contains(m.Data, `"code":"task_error"`) {
		t.Fatalf("dead-lettered %+v", m)
	}
	e.do(http.MethodPost, "/aep/subscriptions/"+created.ID+"/acks", ackBody("event.acknowledged", ids[8]))
	gatewaytest.Poll(t, "lag 0 after every event settled", func() bool {
		_, b := e.do(http.MethodGet, "/aep/subscriptions/"+created.ID, "")
		return json.Unmarshal(b, &state) == nil && state.Lag == 0 && state.PendingAcks == 0
	})
	// committed offsets are the group's, readable by kadm
	offs, err := e.adm.FetchOffsets(context.Background(), durable.SubscriptionGroup(tenant.MustParse(gateway.DevTenant), created.ID))
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	offs.Each(func(o kadm.OffsetResponse) { sum += o.At })
	if sum != 20 {
		t.Fatalf("committed offsets sum to %d, want 20 (every event, matching or not)", sum)
	}

	code, b = e.do(http.MethodGet, "/aep/subscriptions", "")
	if code != http.StatusOK || !strings.Contains(string(b), created.ID) {
		t.Fatalf("list: %d %s", code, b)
	}
	if code, b = e.do(http.MethodDelete, "/aep/subscriptions/"+created.ID, ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", code, b)
	}
	if code, b = e.do(http.MethodGet, "/aep/subscriptions/"+created.ID, ""); code != http.StatusNotFound {
		t.Fatalf("after delete: %d %s", code, b)
	}
}

func TestSubscriptionsDCreateRejected(t *testing.T) {
	e := newSubsEnv(t, dialectd.SubscriptionsConfig{})
	for _, tc := range []struct{ body, field string }{
		{`{"types":["task.*"],"delivery_mode":"best_effort"}`, "delivery_mode"},
		{`{"types":["task.*"],"expires_at":"2001-01-01T00:00:00Z"}`, "expires_at"},
		{`{"types":["task.*"],"expires_at":"tomorrow"}`, "expires_at"},
		{`{"types":["task.*"],"ack_timeout_ms":5}`, "ack_timeout_ms"},
		{`{"types":["task.*"],"max_attempts":0}`, "max_attempts"},
		{`{"types":5}`, "types"},
		{`{"type":"chat.message","payload":{}}`, "type"},
		{`{"types":["task.*"],"from_cursor":"garbage"}`, "from_cursor"},
		{`[]`, ""},
	} {
		code, b := e.do(http.MethodPost, "/aep/subscriptions", tc.body)
		var eb struct {
			Error struct {
				Code    string            `json:"code"`
				Details map[string]string `json:"details"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &eb); code != http.StatusBadRequest || err != nil || eb.Error.Code != "subscription_rejected" || eb.Error.Details["field"] != tc.field {
			t.Errorf("%s: %d %s", tc.body, code, b)
		}
	}
	if code, b := e.do(http.MethodGet, "/aep/subscriptions/sub_nope", ""); code != http.StatusNotFound {
		t.Fatalf("unknown: %d %s", code, b)
	}
	if code, b := e.do(http.MethodPost, "/aep/subscriptions/sub_nope/acks", "[]"); code != http.StatusNotFound {
		t.Fatalf("acks of an unknown subscription: %d %s", code, b)
	}
}

// expires_at ends an open stream with subscription.expired.
func TestSubscriptionsDExpires(t *testing.T) {
	e := newSubsEnv(t, dialectd.SubscriptionsConfig{})
	exp := time.Now().Add(3 * time.Second).UTC().Format(time.RFC3339Nano)
	code, b := e.do(http.MethodPost, "/aep/subscriptions", `{"types":["task.*"],"expires_at":"`+exp+`"}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	var created struct {
		ID string `json:"subscription_id"`
	}
	_ = json.Unmarshal(b, &created)
	s := e.openPath("/aep/subscriptions/" + created.ID + "/stream")
	m := s.next()
	if m.Event != "subscription.expired" || !strings.Contains(m.Data, created.ID) {
		t.Fatalf("expiry %+v", m)
	}
	if code, _ := e.do(http.MethodGet, "/aep/subscriptions/"+created.ID, ""); code != http.StatusGone {
		t.Fatalf("after expiry: %d", code)
	}
}

// The per-tenant cap on durable subscriptions, acks on a node without the
// stream (recorded in the journal), and the length limits of stored
// strings.
func TestSubscriptionsDCapAndLimits(t *testing.T) {
	e := newSubsEnv(t, dialectd.SubscriptionsConfig{MaxPerTenant: 2})
	var first string
	for i := range 2 {
		code, b := e.do(http.MethodPost, "/aep/subscriptions", `{"types":["task.*"]}`)
		var created struct {
			ID string `json:"subscription_id"`
		}
		if code != http.StatusCreated || json.Unmarshal(b, &created) != nil {
			t.Fatalf("create %d: %d %s", i, code, b)
		}
		if first == "" {
			first = created.ID
		}
	}
	code, b := e.do(http.MethodPost, "/aep/subscriptions", `{"types":["task.*"]}`)
	var eb struct {
		Error struct {
			Code    string            `json:"code"`
			Details map[string]string `json:"details"`
		} `json:"error"`
	}
	if code != http.StatusTooManyRequests || json.Unmarshal(b, &eb) != nil || eb.Error.Code != "subscription_rejected" ||
		eb.Error.Details["limit"] != "max_durable_subscriptions_per_tenant" || eb.Error.Details["max"] != "2" {
		t.Fatalf("over the cap: %d %s", code, b)
	}
	long := strings.Repeat("x", dialectd.MaxAckIDBytes+1)
	body := `[{"type":"event.acknowledged","payload":{"acknowledged_event_id":"evt_1"}},` +
		`{"type":"event.acknowledged","payload":{"acknowledged_event_id":"` + long + `"}},` +
		`{"type":"event.rejected","payload":{"acknowledged_event_id":"evt_2","error":{"code":"task_error","message":"` + strings.Repeat("m", dialectd.MaxRejectMessageBytes+1) + `","retryable":false}}}]`
	code, b = e.do(http.MethodPost, "/aep/subscriptions/"+first+"/acks", body)
	var res struct {
		Results []struct {
			Result string `json:"result"`
		} `json:"results"`
	}
	if code != http.StatusOK || json.Unmarshal(b, &res) != nil || len(res.Results) != 3 ||
		res.Results[0].Result != dialectd.ResultRecorded || res.Results[1].Result != "invalid" || res.Results[2].Result != "invalid" {
		t.Fatalf("acks without a stream here: %d %s", code, b)
	}
	var types []string // each value within the filter's own limits, together over MaxFilterBytes
	for i := range 2 * dialectd.MaxFilterBytes / 900 {
		types = append(types, fmt.Sprintf(`"%03d%s"`, i, strings.Repeat("t", 900)))
	}
	filter := `{"types":[` + strings.Join(types, ",") + `]}`
	if code, b := e.do(http.MethodDelete, "/aep/subscriptions/"+first, ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", code, b)
	}
	code, b = e.do(http.MethodPost, "/aep/subscriptions", filter)
	if code != http.StatusBadRequest || !strings.Contains(string(b), `"field":"filter"`) {
		t.Fatalf("long filter: %d %.200s", code, b)
	}
}
