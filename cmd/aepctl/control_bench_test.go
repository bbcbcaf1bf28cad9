package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/aep-gateway/aep-gateway/internal/aepclient"
	"github.com/coder/websocket"
)

// BenchmarkControl is one "aepctl control" against a kfake gateway with the
// R relay and an aepctl target: "setup" is what every invocation pays
// before sending (dial /socket, hello, subscribe to the session, close);
// "roundtrip" is the whole SendControl (the setup, then the command routed
// through the control topic to the target and its ack back through the
// events topic). Their ratio says what the command itself costs.
func BenchmarkControl(b *testing.B) {
	g := newRelayGateway(b)
	serveTarget(b, g, "s-bench", "control.pause")
	c := &aepclient.Client{BaseURL: g.URL}
	filter, _ := json.Marshal(map[string]string{"session": "s-bench"})
	b.Run("setup", func(b *testing.B) {
		ctx := context.Background()
		for b.Loop() {
			conn, err := aepclient.DialWS(ctx, c, "/socket", nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := aepclient.SayHelloR(ctx, conn, aepclient.RHello("both", "bench")); err != nil {
				b.Fatal(err)
			}
			if err := aepclient.SubscribeR(ctx, conn, controlSubID, aepclient.StreamSpec{RFilter: filter}); err != nil {
				b.Fatal(err)
			}
			_ = conn.Close(websocket.StatusNormalClosure, "")
		}
	})
	b.Run("roundtrip", func(b *testing.B) {
		ctx := context.Background()
		for b.Loop() {
			res, err := SendControl(ctx, c, ControlOptions{Type: "control.pause", Session: "s-bench"})
			if err != nil || res.Result != resultAccepted {
				b.Fatalf("%+v %v", res, err)
			}
		}
	})
}
