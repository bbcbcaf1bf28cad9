package integration

import (
	"strings"
	"testing"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// Dialect D over WebSocket through the binary: session handshake, a
// subscription, an event published on one socket delivered on another with
// delivery metadata; SIGTERM with sockets open exits cleanly.
func TestWebSocketDThroughTheBinary(t *testing.T) {
	b := StartBroker(t)
	prefix := strings.ReplaceAll(TopicName(t), "_", "-")
	g := startGateway(t, "--kafka-brokers", strings.Join(b.Seeds, ","),
		"--topic-template", prefix+".{tenant}.events", "--topic-partitions", "3", "--topic-replication-factor", "1")
	wsURL := gatewaytest.WSURL(g.URL, "/aep")

	consumer := gatewaytest.DialWSD(t, wsURL, gatewaytest.WSOptions{})
	if m := consumer.Subscribe("evt_sub", `{"types":["task.*"],"session_id":"sess_ws"}`); m.Type != "subscription.created" {
		t.Fatalf("subscribe: %s", m.Raw)
	}

	emitter := gatewaytest.DialWSD(t, wsURL, gatewaytest.WSOptions{})
	emitter.Send(dEvent(1, "sess_ws"))
	if m := emitter.Next(); m.Type != "event.acknowledged" {
		t.Fatalf("publish over the socket: %s", m.Raw)
	}
	m := consumer.Next()
	if m.Type != "task.progress" || m.ID != "evt_sess_ws_0001" {
		t.Fatalf("delivered: %s", m.Raw)
	}
	if d := m.Delivery; d.Sequence != 1 || d.Cursor == "" || d.Mode == "" {
		t.Fatalf("delivery metadata: %s", m.Raw)
	}
	g.stop() // sockets still open: shutdown must close them, not wait for them
}
