package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// startWSDNodes runs n gateways on one broker with topics of their own.
func startWSDNodes(t *testing.T, b *Broker, n int) (nodes []*gatewayProc, prefix string) {
	t.Helper()
	prefix = strings.ReplaceAll(TopicName(t), "_", "-")
	for range n {
		nodes = append(nodes, startGateway(t, "--kafka-brokers", strings.Join(b.Seeds, ","),
			"--topic-template", prefix+".{tenant}.events", "--topic-partitions", "3", "--topic-replication-factor", "1"))
	}
	return nodes, prefix
}

// publishD posts events to g's ingest endpoint in requests of at most 500.
func publishD(ctx context.Context, t *testing.T, g *gatewayProc, events []string) {
	t.Helper()
	for len(events) > 0 {
		k := min(500, len(events))
		r, err := g.post(ctx, "/aep/events", "application/x-ndjson", nil, strings.Join(events[:k], "\n")+"\n")
		if err != nil || r.status != http.StatusAccepted {
			t.Fatalf("publish: %v %d %s", err, r.status, r.body)
		}
		events = events[k:]
	}
}

func typedEvent(id, typ string) string {
	return fmt.Sprintf(`{"aep_version":"0.1","id":%q,"type":%q,"source":"agent:x","session_id":"sess_c","created_at":"2026-07-09T10:00:00Z","payload":{}}`, id, typ)
}

// Ad-hoc at_least_once WebSocket subscriptions of one tenant on two
// gateways, three connections of 32 subscriptions each (issue 23): every
// subscription receives exactly the events of its type pattern, once, and
// none is ended by another connection's.
func TestWebSocketDAtLeastOnceSubscriptionsDoNotCollide(t *testing.T) {
	const conns, subs, perSub = 3, 32, 2
	b := StartBroker(t)
	nodes, _ := startWSDNodes(t, b, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ws := make([]*gatewaytest.WSD, conns)
	wire := make([]map[string]int, conns) // subscription_id -> pattern index, per connection
	for c := range ws {
		ws[c] = gatewaytest.DialWSD(t, gatewaytest.WSURL(nodes[c%len(nodes)].URL, "/aep"), gatewaytest.WSOptions{Buffer: subs * perSub * 2})
		wire[c] = map[string]int{}
		for s := range subs {
			id := ws[c].MustSubscribe(fmt.Sprintf("evt_s_%d_%d", c, s), fmt.Sprintf(`{"types":["c%d.s%02d.*"],"delivery_mode":"at_least_once"}`, c, s))
			wire[c][id] = s
		}
	}
	var events []string
	for c := range conns {
		for s := range subs {
			for k := range perSub {
				events = append(events, typedEvent(fmt.Sprintf("evt_c%d_s%02d_%d", c, s, k), fmt.Sprintf("c%d.s%02d.done", c, s)))
			}
		}
	}
	publishD(ctx, t, nodes[0], events)
	for c, w := range ws {
		got := map[string]bool{}
		for len(got) < subs*perSub {
			m := w.Next()
			if !m.Delivered() {
				t.Fatalf("connection %d after %d events: %s", c, len(got), m.Raw)
			}
			var ec, es, k int
			if _, err := fmt.Sscanf(m.ID, "evt_c%d_s%d_%d", &ec, &es, &k); err != nil || got[m.ID] {
				t.Fatalf("connection %d: unexpected or repeated %s", c, m.Raw)
			}
			if s, ok := wire[c][m.Delivery.SubscriptionID]; !ok || ec != c || es != s {
				t.Fatalf("connection %d: %s delivered to %s: %s", c, m.ID, m.Delivery.SubscriptionID, m.Raw)
			}
			got[m.ID] = true
			w.Send(gatewaytest.DControl("evt_ack_"+m.ID, "event.acknowledged", `{"acknowledged_event_id":"`+m.ID+`"}`))
		}
	}
	for c, w := range ws {
		w.Send(gatewaytest.DControl("evt_cap", "capabilities.requested", `{}`))
		if m := w.Next(); m.Type != "capabilities.declared" {
			t.Fatalf("connection %d after its acks: %s", c, m.Raw)
		}
	}
}

// A burst of 1000 acks over a socket attached to a durable subscription,
// through the binary on real Kafka: a few journal records, every ack in
// the journal once the next message is answered.
func TestWebSocketDAckBurstThroughTheBinary(t *testing.T) {
	const n = 1000
	b := StartBroker(t)
	nodes, prefix := startWSDNodes(t, b, 1)
	g := nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := g.post(ctx, "/aep/subscriptions", "application/json", nil, `{"type":"subscription.requested","payload":{"types":["task.*"],"delivery_mode":"at_least_once","ack_timeout_ms":3600000}}`)
	var created struct {
		ID string `json:"subscription_id"`
	}
	if err != nil || r.status != http.StatusCreated || json.Unmarshal(r.body, &created) != nil {
		t.Fatalf("create: %v %d %s", err, r.status, r.body)
	}
	ws := gatewaytest.DialWSD(t, gatewaytest.WSURL(g.URL, "/aep"), gatewaytest.WSOptions{Buffer: n + 16})
	ws.MustSubscribe("evt_attach", `{"subscription_id":"`+created.ID+`"}`)
	var events []string
	for i := range n {
		events = append(events, typedEvent(fmt.Sprintf("evt_b%04d", i), "task.updated"))
	}
	publishD(ctx, t, g, events)
	var ids []string
	for len(ids) < n {
		if m := ws.Next(); m.Delivered() {
			ids = append(ids, m.ID)
		}
	}
	start := time.Now()
	for _, id := range ids {
		ws.Send(gatewaytest.DControl("evt_ack_"+id, "event.acknowledged", `{"acknowledged_event_id":"`+id+`"}`))
	}
	ws.Send(gatewaytest.DControl("evt_cap", "capabilities.requested", `{}`))
	for {
		m := ws.Next()
		if m.CausationID == "evt_cap" {
			break
		}
		if m.CausationID != "" {
			t.Fatalf("answer during the acks: %s", m.Raw)
		}
	}
	took := time.Since(start)
	records, acked := gatewaytest.JournalAcks(ctx, t, b.Admin(t), []kgo.Opt{kgo.SeedBrokers(b.Seeds...)}, prefix+".default.events.subjournal", created.ID)
	t.Logf("%d acks in %d journal records, %v from the first ack to the answer after the last (%.0f acks/s)", len(acked), records, took, float64(n)/took.Seconds())
	seen := map[string]bool{}
	for _, id := range acked {
		seen[id] = true
	}
	if len(seen) != n || records > 50 {
		t.Fatalf("%d distinct acks in %d records, want %d in a few", len(seen), records, n)
	}
}
