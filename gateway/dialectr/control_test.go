package dialectr_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/dialectr"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// newNodes is n gateway nodes on one kfake cluster: each its own ingest
// server, delivery engine and Relay (its own presence and control
// followers), served over its own socket. They share nothing but Kafka.
func newNodes(t *testing.T, n int, mutate func(i int, c *dialectr.Config)) []*env {
	t.Helper()
	st := gatewaytest.New(t, gatewaytest.Options{Partitions: 4})
	var nodes []*env
	for i := range n {
		srv := st.Server
		if i > 0 {
			var err error
			srv, err = gateway.New(gateway.Config{Logger: zerolog.New(io.Discard)},
				gateway.Deps{Topics: st.Provisioner, Writer: gateway.KafkaWriter{Client: st.Client}, Pinger: st.Client})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
		}
		nodes = append(nodes, serveNode(t, st, srv, func(c *dialectr.Config) {
			c.Authenticated, c.NodeID, c.PresenceTTL = true, fmt.Sprintf("node-%d", i), 3*time.Second
			if mutate != nil {
				mutate(i, c)
			}
		}))
	}
	return nodes
}

// targetHello declares control.accepts (and an ack window and emits the
// roster relays verbatim).
const targetHello = `{"type":"hello","versions":["0.1"],"role":"emitter","identity":{"agent":"agent-t","instance":"host/1"},"capabilities":{"emits":["session","run"],"control":{"accepts":["control.cancel"],"ack_window_ms":2500}}}`

// claim connects a target to node e and claims session by emitting its
// first event.
func claim(e *env, session string) *gatewaytest.WSR {
	e.t.Helper()
	w := e.dialWS(targetHello)
	w.Send(rEvent(session+"-start", session, 0, 0))
	return w
}

// command is a control command to session.
func command(id, typ, session string) string {
	return fmt.Sprintf(`{"aep":"0.1","id":%q,"type":%q,"time":"2026-07-03T10:14:00.000Z","source":"aep://ops/agent/ops-bot","agent":"ops-bot","session":%q,"run":"r1","data":{"scope":"run"}}`,
		id, typ, session)
}

// rosterSessions asks node e for its roster and returns its sessions.
func rosterSessions(t testing.TB, w *gatewaytest.WSR, id string) ([]string, gatewaytest.RFrame) {
	t.Helper()
	w.Send(`{"type":"roster","id":"` + id + `"}`)
	f := w.Next()
	if f.Str("type") != "roster" || f.Str("id") != id {
		t.Fatalf("got %v, want the roster %s", f, id)
	}
	var out []string
	entries, _ := f["entries"].([]any)
	for _, x := range entries {
		m, _ := x.(map[string]any)
		s, _ := m["session"].(string)
		out = append(out, s)
	}
	sort.Strings(out)
	return out, f
}

// eventually polls the roster of w until it lists want (in order).
func eventually(t *testing.T, w *gatewaytest.WSR, want []string) gatewaytest.RFrame {
	t.Helper()
	deadline := time.Now().Add(gatewaytest.Wait)
	for i := 0; ; i++ {
		got, f := rosterSessions(t, w, fmt.Sprint("r-", i))
		if slices.Equal(got, want) {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("roster %v, want %v", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The roster of one node lists claims held on another: an entry per live
// (connection, session) with the hello's declarations verbatim; a claim
// ends with its connection; emitters are refused in-band.
func TestRosterAcrossNodes(t *testing.T) {
	nodes := newNodes(t, 2, nil)
	a, b := nodes[0], nodes[1]
	consumer := a.dialWS(consumerHello)
	eventually(t, consumer, nil)

	t1 := claim(b, "s-1")
	t2 := claim(a, "s-1") // a second claimant of s-1: two entries, never merged
	t2.Send(rEvent("s-2-start", "s-2", 0, 0))
	f := eventually(t, consumer, []string{"s-1", "s-1", "s-2"})
	e0 := f["entries"].([]any)[0].(map[string]any)
	if e0["agent"] != "agent-t" || e0["instance"] != "host/1" {
		t.Errorf("entry %v: want agent-t host/1", e0)
	}
	if got := fmt.Sprint(e0["control"]); got != "map[accepts:[control.cancel] ack_window_ms:2500]" {
		t.Errorf("control relayed as %s", got)
	}
	if got := fmt.Sprint(e0["emits"]); got != "[session run]" {
		t.Errorf("emits relayed as %s", got)
	}
	if _, ok := e0["node"]; ok {
		t.Errorf("entry %v carries members its claimant never declared", e0)
	}

	_ = t1.C.Close(websocket.StatusNormalClosure, "")
	eventually(t, consumer, []string{"s-1", "s-2"})
	_ = t2.C.Close(websocket.StatusNormalClosure, "")
	eventually(t, consumer, nil)

	em := b.dialWS(targetHello)
	em.Send(`{"type":"roster","id":"deny"}`)
	if f := em.Next(); f.Str("type") != "error" || f.Str("id") != "deny" || f.Str("code") != aep.CodeRUnauthorized {
		t.Fatalf("emitter roster request: %v, want unauthorized with the id", f)
	}
	em.Send(rEvent("s-3-start", "s-3", 0, 0)) // the connection survives
	eventually(t, consumer, []string{"s-3"})
}

// A command sent to node A reaches the one claimant connected to node B,
// byte-identical, and lands once in the session's history; refusals are
// cause-correlated error frames, never events.
func TestControlAcrossNodes(t *testing.T) {
	nodes := newNodes(t, 2, nil)
	a, b := nodes[0], nodes[1]
	sender := a.dialWS(consumerHello)
	refused := func(id, code string) {
		t.Helper()
		f := sender.Next()
		if f.Str("type") != "error" || f.Str("cause") != id || f.Str("code") != code {
			t.Fatalf("got %v, want error %s with cause %s", f, code, id)
		}
	}
	sender.Send(command("c-0", "control.cancel", "s-t"))
	refused("c-0", aep.CodeRNoRoute)

	target := claim(b, "s-t")
	eventually(t, sender, []string{"s-t"})
	sender.Send(command("c-1", "control.pause", "s-t"))
	refused("c-1", aep.CodeRUnsupported)

	cmd := command("c-2", "control.cancel", "s-t")
	sender.Send(cmd)
	if got := string(target.NextFrame()); got != cmd {
		t.Fatalf("target got %s, want the command byte for byte", got)
	}
	sender.Send(cmd) // a retransmit reaches the target again (it re-acks)
	if got := string(target.NextFrame()); got != cmd {
		t.Fatalf("retransmit: target got %s", got)
	}
	// The ack is an ordinary session event of the target.
	target.Send(`{"aep":"0.1","id":"ack-2","type":"control.accepted","time":"2026-07-03T10:14:01.000Z","source":"aep://host-a/agent/claude-code/session/s-t","agent":"agent-t","session":"s-t","seq":1,"cause":"c-2","data":{}}`)

	// History after seq 0: the command once (seq-less, it replays after
	// the event it follows in the log), then the ack; no refusal of c-0
	// or c-1.
	resp, cancel := a.rawSSE(url.Values{"live": {"0"}, "from": {`[{"session":"s-t","seq":0}]`}, "filter": {`{"session":"s-t"}`}}, nil)
	defer cancel()
	deadline := time.Now().Add(gatewaytest.Wait)
	var ids []string
	for {
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		ids = ids[:0]
		for _, line := range strings.Split(string(body), "\n") {
			if rest, ok := strings.CutPrefix(line, "data: "); ok {
				i := strings.Index(rest, `"id":"`) + 6
				ids = append(ids, rest[i:i+strings.IndexByte(rest[i:], '"')])
			}
		}
		if len(ids) >= 1 && ids[len(ids)-1] == "ack-2" || time.Now().After(deadline) {
			break
		}
		cancel()
		time.Sleep(50 * time.Millisecond)
		resp, cancel = a.rawSSE(url.Values{"live": {"0"}, "from": {`[{"session":"s-t","seq":0}]`}, "filter": {`{"session":"s-t"}`}}, nil)
	}
	if !slices.Equal(ids, []string{"c-2", "ack-2"}) {
		t.Fatalf("session history %v, want the command once then its ack", ids)
	}

	// A second claimant makes the session ambiguous.
	claim(a, "s-t")
	eventually(t, sender, []string{"s-t", "s-t"})
	sender.Send(command("c-3", "control.cancel", "s-t"))
	refused("c-3", aep.CodeRAmbiguous)
}

// Commands never flow on an unauthenticated binding (neither from nor to
// one), and the tenant's policy decides who may send them.
func TestControlRefusedWithoutAuthOrByPolicy(t *testing.T) {
	nodes := newNodes(t, 3, func(i int, c *dialectr.Config) {
		switch i {
		case 0:
			c.Authenticated = false
		case 1:
			c.ControlPolicy, _ = dialectr.ParseControlPolicy("agents:pager")
		}
	})
	claim(nodes[2], "s-p")
	claim(nodes[0], "s-dev") // a claimant behind the unauthenticated node
	for i, n := range nodes[:2] {
		w := n.dialWS(consumerHello)
		w.Send(command("c", "control.cancel", "s-p"))
		if f := w.Next(); f.Str("code") != aep.CodeRUnauthorized || f.Str("cause") != "c" {
			t.Fatalf("node %d: %v, want unauthorized", i, f)
		}
	}
	if c := nodes[0].relay.Capabilities(); c.Control != nil {
		t.Errorf("an unauthenticated relay advertises control: %+v", c.Control)
	}
	w := nodes[2].dialWS(consumerHello)
	eventually(t, w, []string{"s-dev", "s-p"})
	w.Send(command("c-dev", "control.cancel", "s-dev"))
	if f := w.Next(); f.Str("code") != aep.CodeRUnauthorized || f.Str("cause") != "c-dev" {
		t.Fatalf("command to a claimant on an unauthenticated node: %v, want unauthorized", f)
	}
}

// A claim whose node died (never renewed, never deleted) leaves the
// roster at its expiry, and a live node deletes it from the compacted
// presence topic a few TTLs later. That holds too for a claim of an
// earlier process under this node's own id (a restarted container keeps
// its pod name as --node-id): it is not mistaken for one of this
// process's claims and left in the topic forever.
func TestStaleClaimExpiresAndIsDeleted(t *testing.T) {
	for _, node := range []string{"node-gone", "node-0"} {
		t.Run(node, func(t *testing.T) { testStaleClaim(t, node) })
	}
}

func testStaleClaim(t *testing.T, node string) {
	nodes := newNodes(t, 1, func(_ int, c *dialectr.Config) { c.PresenceTTL = 300 * time.Millisecond })
	topic := "aep.default.events.presence"
	w := nodes[0].dialWS(consumerHello)
	eventually(t, w, nil) // the presence topic exists and is followed
	key := "s-dead\x00" + node + "/1"
	val := fmt.Sprintf(`{"session":"s-dead","agent":"x","node":%q,"expires":%d}`, node, time.Now().Add(time.Second).UnixMilli())
	if err := nodes[0].cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(val)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	eventually(t, w, []string{"s-dead"})
	eventually(t, w, nil) // expired
	cl, err := kgo.NewClient(kgo.SeedBrokers(nodes[0].seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), gatewaytest.Wait)
	defer cancel()
	for ctx.Err() == nil {
		deleted := false
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { deleted = deleted || string(r.Key) == key && r.Value == nil })
		if deleted {
			return
		}
	}
	t.Fatal("the stale claim was never deleted from the presence topic")
}

func TestParseControlPolicy(t *testing.T) {
	p, err := dialectr.ParseControlPolicy("agents:a|b;acme=off;beta=any")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Default.Senders) != 2 || !p.Tenants["acme"].Off || p.Tenants["beta"].Off || len(p.Tenants["beta"].Senders) != 0 {
		t.Fatalf("parsed %+v", p)
	}
	for _, bad := range []string{"maybe", "any;x", "agents:", "agents:a||b", "t=nope"} {
		if _, err := dialectr.ParseControlPolicy(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestCommandLatency measures how long a command takes from the sender's
// write to the target's read: over one direct WebSocket (the baseline: a
// sender connected to the target itself), routed on one node, and routed
// across two nodes (ingest write, control topic write, the other node's
// fetch). It asserts only that every command arrives; the figures are
// logged (go test -run CommandLatency -v).
func TestCommandLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("latency figures: not in -short")
	}
	const n = 100
	nodes := newNodes(t, 2, nil)

	// Baseline: a plain WebSocket hop, in-process, no relay.
	got := make(chan time.Time, n)
	hs := httptest.NewServer(httpHandlerFunc(func(c *websocket.Conn) {
		for {
			if _, _, err := c.Read(context.Background()); err != nil {
				return
			}
			got <- time.Now()
		}
	}))
	defer hs.Close()
	direct, _, err := websocket.Dial(context.Background(), strings.Replace(hs.URL, "http", "ws", 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.CloseNow()
	measure := func(send func(i int), recv func() time.Time) []time.Duration {
		var ds []time.Duration
		for i := range n {
			t0 := time.Now()
			send(i)
			ds = append(ds, recv().Sub(t0))
		}
		slices.Sort(ds)
		return ds
	}
	base := measure(func(i int) {
		_ = direct.Write(context.Background(), websocket.MessageText, []byte(command(fmt.Sprint("d-", i), "control.cancel", "s")))
	}, func() time.Time { return <-got })

	routed := func(sender, target *env, session string) []time.Duration {
		tw := claim(target, session)
		sw := sender.dialWS(consumerHello)
		eventually(t, sw, []string{session})
		ds := measure(func(i int) { sw.Send(command(fmt.Sprintf("%s-%d", session, i), "control.cancel", session)) },
			func() time.Time { tw.NextFrame(); return time.Now() })
		_ = tw.C.Close(websocket.StatusNormalClosure, "")
		eventually(t, sw, nil)
		return ds
	}
	same := routed(nodes[0], nodes[0], "lat-same")
	cross := routed(nodes[0], nodes[1], "lat-cross")
	q := func(ds []time.Duration, p float64) time.Duration { return ds[int(float64(len(ds)-1)*p)] }
	for _, r := range []struct {
		name string
		ds   []time.Duration
	}{{"direct WebSocket", base}, {"routed, same node", same}, {"routed, across nodes", cross}} {
		t.Logf("%-22s p50 %8s  p95 %8s  (p50 %.0fx the direct hop)", r.name, q(r.ds, .5), q(r.ds, .95), float64(q(r.ds, .5))/float64(q(base, .5)))
	}
}

// httpHandlerFunc accepts a WebSocket and hands it to serve.
func httpHandlerFunc(serve func(*websocket.Conn)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		serve(c)
	}
}
