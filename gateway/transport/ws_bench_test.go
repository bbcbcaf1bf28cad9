package transport_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/coder/websocket"

	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// BenchmarkConnBurst: a burst of 100 messages of 300 B queued at once on
// one Conn over a real socket, read by a coder/websocket client in the
// same process (its reads are in the figures too). ns/msg and allocs/msg
// are per message of the burst.
func BenchmarkConnBurst(b *testing.B) {
	const burst = 100
	msg := make([]byte, 300)
	for i := range msg {
		msg[i] = 'a' + byte(i%26)
	}
	url, _ := wsServer(b, transport.WSConfig{}, func(c *transport.Conn) func(websocket.MessageType, []byte) bool {
		return func(_ websocket.MessageType, data []byte) bool {
			n, _ := strconv.Atoi(string(data))
			for range n {
				if !c.Send(msg) {
					return false
				}
			}
			return true
		}
	})
	cl := dial(b, url)
	ctx := context.Background()
	req := []byte(strconv.Itoa(burst))
	b.ReportAllocs()
	for b.Loop() {
		if err := cl.Write(ctx, websocket.MessageText, req); err != nil {
			b.Fatal(err)
		}
		for range burst {
			if _, _, err := cl.Read(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*burst), "ns/msg")
}
