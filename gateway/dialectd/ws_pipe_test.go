package dialectd_test

import (
	"fmt"
	"testing"

	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/dialectd"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// A client that publishes without waiting gets every answer in the order
// of its events, a refusal among them in its place, and what the gateway
// answers itself (capabilities.declared) after all of them; a subscriber
// receives the accepted events in order.
func TestWSDPublishesWithoutWaitingAreAnsweredInOrder(t *testing.T) {
	e := newWSEnv(t, dialectd.WSConfig{})
	consumer := e.open()
	consumer.MustSubscribe("evt_s", `{"types":"tool.call.*"}`)
	producer := e.open()
	const n = 60
	bad := n / 2
	var want []string
	for i := range n {
		id := fmt.Sprintf("evt_p%02d", i)
		if i == bad {
			producer.Send(`{"aep_version":"0.1","id":"` + id + `","type":"Not A Type","source":"x","created_at":"2026-07-09T10:00:00Z","payload":{}}`)
			continue
		}
		want = append(want, id)
		producer.Send(wsEvent(id, "tool.call.started", "tool:crawler"))
	}
	producer.Send(wsControl("evt_cap", "capabilities.requested", `{}`))
	for i := range n {
		id := fmt.Sprintf("evt_p%02d", i)
		m := producer.Next()
		wantType := "event.acknowledged"
		if i == bad {
			wantType = "event.rejected"
		}
		if m.Type != wantType || m.Str("acknowledged_event_id") != id {
			t.Fatalf("answer %d: %s, want %s for %s", i, m.Raw, wantType, id)
		}
	}
	if m := producer.Next(); m.Type != "capabilities.declared" {
		t.Fatalf("after the answers: %s, want capabilities.declared", m.Raw)
	}
	for i, id := range want {
		if m := consumer.Event(); m.ID != id {
			t.Fatalf("delivery %d: %s, want %s", i, m.ID, id)
		}
	}
}

// Publishes sent faster than the tenant's rate limit allows are taken one
// by one as far as the bucket goes; the rest are refused, each with its
// own retryable rejection, in order, not the whole burst at once.
func TestWSDPublishBurstMeetsTheRateLimitEventByEvent(t *testing.T) {
	e, _ := newWSEnvGW(t, dialectd.WSConfig{}, nil, nil, func(c *gateway.Config) {
		c.RateLimit = gateway.RateLimit{EventsPerSecond: 0.01, Burst: 5}
	})
	producer := e.open()
	const n = 12
	for i := range n {
		producer.Send(wsEvent(fmt.Sprintf("evt_r%02d", i), "tool.call.started", "tool:crawler"))
	}
	for i := range n {
		id := fmt.Sprintf("evt_r%02d", i)
		m := producer.Next()
		if m.Str("acknowledged_event_id") != id {
			t.Fatalf("answer %d names %q, want %s: %s", i, m.Str("acknowledged_event_id"), id, m.Raw)
		}
		switch {
		case i < 5 && m.Type != "event.acknowledged":
			t.Fatalf("event %d, within the burst of 5: %s", i, m.Raw)
		case i >= 5 && (m.Type != "event.rejected" || !retryable(m)):
			t.Fatalf("event %d, over the burst: %s, want a retryable event.rejected", i, m.Raw)
		}
	}
}

// retryable is payload.error.retryable.
func retryable(m gatewaytest.DEnvelope) bool {
	e, _ := m.Payload["error"].(map[string]any)
	r, _ := e["retryable"].(bool)
	return r
}
