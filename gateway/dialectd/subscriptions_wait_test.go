package dialectd_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/dialectd"
	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// subsNode is one gateway node of a two-node test: its engine and the
// durable subscriptions API (plus ingest) over HTTP.
type subsNode struct {
	eng *engine.Engine
	dc  *durable.Cluster
	hs  *httptest.Server
}

func newSubsNode(t *testing.T, st *gatewaytest.Stack, name string) *subsNode {
	t.Helper()
	eng, err := engine.NewEngine(engine.Config{ClientOpts: []kgo.Opt{st.Seeds, kgo.FetchMaxWait(200 * time.Millisecond)},
		Topics: st.Provisioner, Logger: zerolog.New(io.Discard), NodeID: name})
	if err != nil {
		t.Fatal(err)
	}
	dc := dialectd.NewTestDurable(t, eng, nil, st.Seeds, kgo.FetchMaxWait(200*time.Millisecond))
	h := gatewaytest.WithTenant(gateway.DevTenant, dialectd.NewSubscriptionsHandler(dc, st.Keyring,
		dialectd.SubscriptionsConfig{CommitInterval: 20 * time.Millisecond, Logger: zerolog.New(io.Discard)}))
	ws := dialectd.NewWSHandler(eng, dc, st.Keyring, st.Server.IngestFunc(aep.DialectD), dialectd.WSConfig{Logger: zerolog.New(io.Discard)})
	mux := http.NewServeMux()
	mux.Handle("/aep/subscriptions", h)
	mux.Handle("/aep/subscriptions/", h)
	mux.Handle("/aep", gatewaytest.WithTenant(gateway.DevTenant, ws))
	mux.Handle("/", st.Server.Handler())
	n := &subsNode{eng: eng, dc: dc, hs: httptest.NewServer(mux)}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ws.Shutdown(ctx)
		n.hs.CloseClientConnections()
		n.hs.Close()
		dc.Close()
		eng.Close()
	})
	return n
}

// deadHolder makes a durable subscription, streams it on node a, and lets
// node a die (its stream neither checkpoints nor releases); it returns
// node b and the subscription's id.
func deadHolder(t *testing.T) (*subsNode, string) {
	t.Helper()
	st := gatewaytest.New(t, gatewaytest.Options{Partitions: 1})
	gate := gatewaytest.FailProduces(st.Cluster)
	a, b := newSubsNode(t, st, "node-a"), newSubsNode(t, st, "node-b")
	req, err := http.NewRequest(http.MethodPost, a.hs.URL+"/aep/subscriptions", strings.NewReader(`{"types":["task.*"],"ack_timeout_ms":3600000}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var created struct {
		ID string `json:"subscription_id"`
	}
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &created) != nil {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	sa := gatewaytest.MustOpenSSE(t, a.hs.URL+"/aep/subscriptions/"+created.ID+"/stream", gatewaytest.SSEOptions{Buffer: 64})
	if m := sa.Next(); m.Comment() != "stream open" {
		t.Fatalf("node a: %+v", m)
	}
	gate.Store(true)
	a.hs.CloseClientConnections()
	a.dc.Close()
	a.eng.Close()
	gate.Store(false)
	return b, created.ID
}

// A stream opened after its holder's node died waits for the lease: the
// 200, the stream headers and a comment saying what it waits for (and up
// to how long) come at once, the comment again every second, then the
// stream opens. A newer stream request that takes over while it waits ends
// it with subscription.expired {reason "error", error subscription_error,
// retryable} (its status was 200 already).
func TestSubscriptionsDStreamSaysItWaits(t *testing.T) {
	b, id := deadHolder(t)
	path := "/aep/subscriptions/" + id + "/stream"
	first := gatewaytest.MustOpenSSE(t, b.hs.URL+path, gatewaytest.SSEOptions{Buffer: 64})
	if got := first.Resp.Header.Get("AEP-Stream-Node"); got != "node-b" {
		t.Fatalf("AEP-Stream-Node %q", got)
	}
	m := first.Next()
	if !strings.HasPrefix(m.Comment(), "waiting for the previous holder of subscription "+id) ||
		!strings.Contains(m.Comment(), "(epoch ") || !strings.Contains(m.Comment(), "at most ") {
		t.Fatalf("first message %+v, want the waiting comment", m)
	}
	// a newer request takes over while the first one waits
	if m := first.Next(); !strings.HasPrefix(m.Comment(), "waiting for the previous holder") {
		t.Fatalf("second message %+v, want the waiting comment again", m)
	}
	second := gatewaytest.MustOpenSSE(t, b.hs.URL+path, gatewaytest.SSEOptions{Buffer: 64})
	for {
		m := first.Next()
		if strings.HasPrefix(m.Comment(), "waiting") {
			continue
		}
		var ended struct {
			Payload struct {
				SubscriptionID string `json:"subscription_id"`
				Reason         string `json:"reason"`
				Error          struct {
					Code      string `json:"code"`
					Retryable bool   `json:"retryable"`
				} `json:"error"`
			} `json:"payload"`
		}
		if m.Event != "subscription.expired" || json.Unmarshal([]byte(m.Data), &ended) != nil || ended.Payload.SubscriptionID != id ||
			ended.Payload.Reason != "error" || ended.Payload.Error.Code != "subscription_error" || !ended.Payload.Error.Retryable {
			t.Fatalf("the taken-over waiting stream got %+v", m)
		}
		break
	}
	// the newer one keeps waiting, saying so, and then opens
	waits := 0
	for {
		m := second.Next()
		if strings.HasPrefix(m.Comment(), "waiting for the previous holder") {
			waits++
			continue
		}
		if m.Comment() != "stream open" {
			t.Fatalf("second stream: %+v", m)
		}
		break
	}
	if waits < 2 {
		t.Fatalf("%d waiting comments before the stream opened, want one a second", waits)
	}
	// and it delivers (unparked, on the response that already began)
	resp, err := http.Post(b.hs.URL+"/aep/events", "application/x-ndjson", strings.NewReader(
		`{"aep_version":"0.1","id":"evt_after_wait","type":"task.updated","source":"agent:t","session_id":"s1","created_at":"2026-07-09T10:00:00Z","payload":{}}`+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("ingest: %d", resp.StatusCode)
	}
	if m := second.NextSkipping("heartbeat"); m.Event != "task.updated" || !strings.Contains(m.Data, "evt_after_wait") {
		t.Fatalf("after the wait: %+v", m)
	}
}

// Attaching a WebSocket session to a durable subscription whose holder's
// node died says at once that it waits (session.heartbeat {subscription_id,
// status "waiting", holder_epoch, max_wait_ms}, again every second), then
// subscription.created.
func TestWSDAttachSaysItWaits(t *testing.T) {
	b, id := deadHolder(t)
	w := gatewaytest.DialWSD(t, gatewaytest.WSURL(b.hs.URL, "/aep"), gatewaytest.WSOptions{Buffer: 64})
	w.Send(gatewaytest.DControl("evt_attach", "subscription.requested", `{"subscription_id":"`+id+`"}`))
	waits := 0
	for {
		m := w.Next()
		if m.Type == "subscription.created" {
			if m.Str("subscription_id") != id {
				t.Fatalf("created %s", m.Raw)
			}
			break
		}
		if m.Type != "session.heartbeat" || m.Str("subscription_id") != id || m.Str("status") != "waiting" ||
			m.Payload["holder_epoch"] == nil || m.Payload["max_wait_ms"] == nil {
			t.Fatalf("while attaching: %s", m.Raw)
		}
		waits++
	}
	if waits < 2 {
		t.Fatalf("%d waiting notices before subscription.created, want one a second", waits)
	}
}
