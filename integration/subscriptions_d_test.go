package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/twmb/franz-go/pkg/kadm"
)

// A durable at_least_once subscription through the binary: created over
// HTTP, consumed over its SSE stream, 80% acked through the acks endpoint;
// after a reconnect exactly the unacked events come again, each announced
// by event.redelivered with attempt 2; once they are acked too, the
// subscription's consumer group has committed every offset, as kadm reads it.
func TestSubscriptionsDThroughTheBinary(t *testing.T) {
	b := StartBroker(t)
	prefix := strings.ReplaceAll(TopicName(t), "_", "-")
	g := startGateway(t, "--kafka-brokers", strings.Join(b.Seeds, ","),
		"--topic-template", prefix+".{tenant}.events", "--topic-partitions", "3", "--topic-replication-factor", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	do := func(method, path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, g.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}

	code, body := do(http.MethodPost, "/aep/subscriptions", `{"type":"subscription.requested","payload":{"types":["task.*"],"delivery_mode":"at_least_once"}}`)
	var created struct {
		ID           string `json:"subscription_id"`
		DeliveryMode string `json:"delivery_mode"`
	}
	if err := json.Unmarshal(body, &created); code != http.StatusCreated || err != nil || created.DeliveryMode != "at_least_once" {
		t.Fatalf("create: %d %s", code, body)
	}
	var events strings.Builder
	for i := range 10 {
		events.WriteString(dEvent(i, fmt.Sprintf("sess_%d", i%2)) + "\n")
	}
	if res, err := g.post(ctx, "/aep/events", "application/x-ndjson", nil, events.String()); err != nil || res.status != 202 {
		t.Fatalf("ingest: %v %d %s", err, res.status, res.body)
	}

	open := func() *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/aep/subscriptions/"+created.ID+"/stream", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("stream: %v %v", err, resp)
		}
		return resp
	}
	type delivered struct {
		ID       string `json:"id"`
		Delivery struct {
			Mode string `json:"mode"`
		} `json:"delivery"`
		Payload struct {
			OriginalEventID string `json:"original_event_id"`
			Attempt         int    `json:"attempt"`
		} `json:"payload"`
	}
	resp := open()
	var ids []string
	for _, m := range readSSE(ctx, t, resp, 10) {
		var d delivered
		if err := json.Unmarshal([]byte(m.data), &d); err != nil || d.Delivery.Mode != "at_least_once" || m.event != "task.progress" {
			t.Fatalf("delivered %+v", m)
		}
		ids = append(ids, d.ID)
	}
	unacked := map[string]bool{ids[4]: true, ids[9]: true}
	var acks []string
	for _, id := range ids {
		if !unacked[id] {
			acks = append(acks, fmt.Sprintf(`{"aep_version":"0.1","id":"evt_ack_%s","type":"event.acknowledged","source":"agent:c","created_at":"2026-07-09T10:00:00Z","payload":{"acknowledged_event_id":%q}}`, id, id))
		}
	}
	code, body = do(http.MethodPost, "/aep/subscriptions/"+created.ID+"/acks", "["+strings.Join(acks, ",")+"]")
	if code != http.StatusOK || strings.Count(string(body), `"applied"`) != 8 {
		t.Fatalf("acks: %d %s", code, body)
	}
	var state struct {
		Streaming   bool  `json:"streaming"`
		PendingAcks int   `json:"pending_acks"`
		Lag         int64 `json:"lag"`
	}
	_, body = do(http.MethodGet, "/aep/subscriptions/"+created.ID, "")
	if json.Unmarshal(body, &state) != nil || !state.Streaming || state.PendingAcks != 2 {
		t.Fatalf("state with the stream open: %s", body)
	}
	resp.Body.Close()
	if !gatewaytest.Eventually(40*time.Second, 100*time.Millisecond, func() bool {
		_, body = do(http.MethodGet, "/aep/subscriptions/"+created.ID, "")
		return json.Unmarshal(body, &state) == nil && !state.Streaming
	}) {
		t.Fatalf("the first stream was never released: %s", body)
	}

	resp = open()
	msgs := readSSE(ctx, t, resp, 4)
	for i := 0; i < 4; i += 2 {
		var n, d delivered
		if json.Unmarshal([]byte(msgs[i].data), &n) != nil || json.Unmarshal([]byte(msgs[i+1].data), &d) != nil ||
			msgs[i].event != "event.redelivered" || n.Payload.Attempt != 2 || n.Payload.OriginalEventID != d.ID || !unacked[d.ID] {
			t.Fatalf("redelivery %d: %+v then %+v", i/2, msgs[i], msgs[i+1])
		}
		delete(unacked, d.ID)
		code, body = do(http.MethodPost, "/aep/subscriptions/"+created.ID+"/acks",
			fmt.Sprintf(`{"type":"event.acknowledged","payload":{"acknowledged_event_id":%q}}`, d.ID))
		if code != http.StatusOK || !strings.Contains(string(body), `"applied"`) {
			t.Fatalf("ack %s: %d %s", d.ID, code, body)
		}
	}
	if !gatewaytest.Eventually(20*time.Second, 100*time.Millisecond, func() bool {
		_, body = do(http.MethodGet, "/aep/subscriptions/"+created.ID, "")
		return json.Unmarshal(body, &state) == nil && state.Lag == 0 && state.PendingAcks == 0
	}) {
		t.Fatalf("never fully committed: %s", body)
	}
	offs, err := b.Admin(t).FetchOffsets(ctx, "aep.default.sub."+created.ID)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == prefix+".default.events" {
			sum += o.At
		}
	})
	if sum != 10 {
		t.Fatalf("committed offsets of the group sum to %d, want 10: %+v", sum, offs)
	}
	g.stop() // the second stream is still open: shutdown ends it
}
