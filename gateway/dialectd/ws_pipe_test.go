package dialectd_test

import (
	"fmt"
	"testing"

	"github.com/aep-gateway/aep-gateway/gateway/dialectd"
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
