package dialectd

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

var wsTestTenant = tenant.MustParse("default")

// wsTestHandler builds a handler on kfake with a real gateway ingest.
func wsTestHandler(tb testing.TB, cfg WSConfig) *WSHandler {
	tb.Helper()
	st := gatewaytest.New(tb, gatewaytest.Options{Partitions: 2})
	srv, kr := st.Server, st.Keyring
	eng, err := engine.NewEngine(engine.Config{ClientOpts: []kgo.Opt{st.Seeds}, Topics: st.Provisioner, Logger: zerolog.New(io.Discard)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(eng.Close)
	dc := NewTestDurable(tb, eng, nil, st.Seeds)
	cfg.Logger = zerolog.New(io.Discard)
	return NewWSHandler(eng, dc, kr, srv.IngestFunc(aep.DialectD), cfg)
}

// FuzzWSHandle feeds client messages to a session (without a socket: the
// outbound queue is inspected instead) and checks that nothing panics,
// that every answer is a gateway envelope, and that a session that ends
// always queues its close frame.
func FuzzWSHandle(f *testing.F) {
	open := `{"aep_version":"0.1","id":"evt_o","type":"session.opened","source":"agent:a","created_at":"2026-07-09T10:00:00Z","payload":{"session_id":"s","version":"0.1"}}`
	for _, s := range []string{
		open,
		`{"aep_version":"0.1","id":"evt_s","type":"subscription.requested","source":"agent:a","created_at":"2026-07-09T10:00:00Z","payload":{"types":"task.*"}}`,
		`{"aep_version":"0.1","id":"evt_s","type":"subscription.requested","source":"agent:a","created_at":"2026-07-09T10:00:00Z","payload":{}}`,
		`{"aep_version":"0.1","id":"evt_s","type":"subscription.requested","source":"agent:a","created_at":"2026-07-09T10:00:00Z","payload":{"types":"*","from_cursor":"AAAA"}}`,
		`{"aep_version":"0.1","id":"evt_c","type":"subscription.cancelled","source":"agent:a","created_at":"2026-07-09T10:00:00Z","payload":{"subscription_id":"sub_0001"}}`,
		`{"aep_version":"0.1","id":"evt_p","type":"task.progress","source":"agent:a","created_at":"2026-07-09T10:00:00Z","payload":{"p":1}}`,
		`{"aep_version":"0.1","id":"evt_x","type":"session.closed","source":"agent:a","created_at":"2026-07-09T10:00:00Z","payload":{}}`,
		`{"aep_version":"0.1","id":"evt_o","type":"session.opened","source":"agent:a","created_at":"2026-07-09T10:00:00Z","payload":"x"}`,
		`{"aep_version":"0.1","id":"evt_a","type":"event.acknowledged","source":"agent:a","created_at":"2026-07-09T10:00:00Z","payload":{"acknowledged_event_id":"evt_1"}}`,
		`{"aep_version":"0.1","id":"evt_a","type":"event.acknowledged","source":"agent:a","created_at":"2026-07-09T10:00:00Z","payload":{}}`,
		`{"aep_version":"0.1","id":"evt_n","type":"event.rejected","source":"agent:a","created_at":"2026-07-09T10:00:00Z","payload":{"acknowledged_event_id":"evt_1","error":{"code":"task_error","message":"no","retryable":false}}}`,
		`{"aep":"1"}`, `[]`, `{`, "",
	} {
		f.Add(true, []byte(s))
		f.Add(false, []byte(s))
	}
	h := wsTestHandler(f, WSConfig{Heartbeat: -1, Outbound: 64, MaxSubscriptions: 4})
	f.Fuzz(func(t *testing.T, opened bool, msg []byte) {
		c := newWSConn(h, nil, wsTestTenant, nil)
		defer func() {
			c.endSubs()
			c.conn.Stop()
		}()
		if opened && !c.handle([]byte(open)) {
			t.Fatal("session.opened refused")
		}
		ok := c.handle(msg)
		if !ok && !c.conn.CloseQueued() {
			t.Fatalf("session ended without a close frame for %q", msg)
		}
		for _, o := range c.conn.TakeQueued() {
			if o.IsClose() && len(o.Msg) == 0 {
				continue
			}
			var env struct {
				Version string `json:"aep_version"`
				ID      string `json:"id"`
				Type    string `json:"type"`
			}
			if err := json.Unmarshal(o.Msg, &env); err != nil || env.Version != "0.1" || !strings.HasPrefix(env.ID, "evt_") || env.Type == "" {
				t.Fatalf("answer %s to %q", o.Msg, msg)
			}
		}
	})
}

// BenchmarkWSEncodeDelivery: the per-event cost of the WebSocket binding
// (cursor signing, delivery member, subscription id), against the baseline
// of the SSE data line alone with a precomputed cursor.
func BenchmarkWSEncodeDelivery(b *testing.B) {
	kr, err := cursor.NewKeyring(cursor.Key{ID: 1, Secret: []byte("0123456789abcdef0123")})
	if err != nil {
		b.Fatal(err)
	}
	h := &WSHandler{kr: kr, cfg: WSConfig{Source: "gateway:aep-gateway"}}
	c := &wsConn{h: h}
	st := &streamState{tenant: wsTestTenant, mode: ModeReplayable, state: cursor.TopicState{Partitions: 3, End: []int64{0, 0, 0}}}
	st.frontier = st.fullFrontier(nil)
	s := &wsSub{id: "sub_0001", st: st}
	d := engine.Delivery{Event: &engine.Event{Record: &kgo.Record{Value: benchEvent, Partition: 1, Offset: 41}}, Sequence: 42}
	cur, err := st.cursorAt(kr, 42)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("baseline-appendData", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf, _ := appendData(make([]byte, 0, len(benchEvent)+len(cur)+96), benchEvent, ModeReplayable, 42, cur)
			_ = buf
		}
	})
	b.Run("ws-event", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := c.encodeDelivery(s, d); err != nil {
				b.Fatal(err)
			}
		}
	})
}
