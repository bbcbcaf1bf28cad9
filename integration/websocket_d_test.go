package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func wsEnvelope(id, typ, payload string) string {
	return fmt.Sprintf(`{"aep_version":"0.1","id":%q,"type":%q,"source":"agent:it","created_at":"2026-07-09T10:00:00Z","payload":%s}`, id, typ, payload)
}

// wsNext reads the next text message and decodes its type and the raw bytes.
func wsNext(ctx context.Context, t *testing.T, c *websocket.Conn) (string, map[string]any) {
	t.Helper()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("websocket read: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("frame is not JSON: %s", b)
	}
	typ, _ := m["type"].(string)
	return typ, m
}

// Dialect D over WebSocket through the binary: session handshake, a
// subscription, an event published on one socket delivered on another with
// delivery metadata; SIGTERM with sockets open exits cleanly.
func TestWebSocketDThroughTheBinary(t *testing.T) {
	b := StartBroker(t)
	prefix := strings.ReplaceAll(TopicName(t), "_", "-")
	g := startGateway(t, "--kafka-brokers", strings.Join(b.Seeds, ","),
		"--topic-template", prefix+".{tenant}.events", "--topic-partitions", "3", "--topic-replication-factor", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(g.URL, "http") + "/aep"

	open := func(session string) *websocket.Conn {
		c, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{Subprotocols: []string{"aep-0.1"}})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		if err := c.Write(ctx, websocket.MessageText, []byte(wsEnvelope("evt_open_"+session, "session.opened",
			fmt.Sprintf(`{"session_id":%q,"version":"0.1"}`, session)))); err != nil {
			t.Fatal(err)
		}
		if typ, m := wsNext(ctx, t, c); typ != "session.ready" {
			t.Fatalf("after session.opened: %v", m)
		}
		return c
	}
	consumer := open("sess_consumer")
	defer consumer.CloseNow()
	sub := wsEnvelope("evt_sub", "subscription.requested", `{"types":["task.*"],"session_id":"sess_ws"}`)
	if err := consumer.Write(ctx, websocket.MessageText, []byte(sub)); err != nil {
		t.Fatal(err)
	}
	if typ, m := wsNext(ctx, t, consumer); typ != "subscription.created" {
		t.Fatalf("subscribe: %v", m)
	}

	emitter := open("sess_emitter")
	defer emitter.CloseNow()
	if err := emitter.Write(ctx, websocket.MessageText, []byte(dEvent(1, "sess_ws"))); err != nil {
		t.Fatal(err)
	}
	if typ, m := wsNext(ctx, t, emitter); typ != "event.acknowledged" {
		t.Fatalf("publish over the socket: %v", m)
	}
	typ, m := wsNext(ctx, t, consumer)
	if typ != "task.progress" || m["id"] != "evt_sess_ws_0001" {
		t.Fatalf("delivered: %v", m)
	}
	d, _ := m["delivery"].(map[string]any)
	if d["sequence"] != float64(1) || d["cursor"] == "" || d["mode"] == "" {
		t.Fatalf("delivery metadata: %v", d)
	}
	g.stop() // sockets still open: shutdown must close them, not wait for them
}
