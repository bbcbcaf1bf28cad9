package dialectr_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aep-gateway/aep-gateway/gateway/dialectr"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

func TestWSHelloNegotiates(t *testing.T) {
	e := newEnv(t, nil)
	w := e.dialWS("")
	w.Send(`{"type":"hello","versions":["0.9","0.1"],"role":"both","identity":{"agent":"a"},"capabilities":{"unknown":{"x":1}}}`)
	var h struct {
		Type         string
		Versions     []string
		Role         string
		Capabilities struct {
			Filters []string
			Capture []string
			Replay  struct {
				Buffer int
				All    bool
			}
		}
	}
	if err := json.Unmarshal(w.NextFrame(), &h); err != nil {
		t.Fatal(err)
	}
	if h.Type != "hello" || fmt.Sprint(h.Versions) != "[0.1]" || fmt.Sprint(h.Capabilities.Filters) != "[attr-match]" ||
		h.Capabilities.Replay.Buffer != 1000 || !h.Capabilities.Replay.All || len(h.Capabilities.Capture) != 4 {
		t.Fatalf("server hello %+v", h)
	}
}

func TestWSHelloRefusals(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct {
		name, first, code string
	}{
		{"no common version", `{"type":"hello","versions":["9.0"],"role":"consumer"}`, "version-unsupported"},
		{"subscribe first", `{"type":"subscribe","id":"s1"}`, "hello-required"},
		{"not JSON", `hello`, "hello-required"},
		{"bad role", `{"type":"hello","versions":["0.1"],"role":"relay"}`, "hello-required"},
		{"emitter without agent", `{"type":"hello","versions":["0.1"],"role":"emitter"}`, "hello-required"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := e.dialWS("")
			w.Send(c.first)
			f := w.Next()
			if f.Str("type") != "error" || f.Str("code") != c.code || f.Str("detail") == "" {
				t.Fatalf("got %v, want error %s", f, c.code)
			}
			if c.code == "version-unsupported" && fmt.Sprint(f["versions"]) != "[0.1]" {
				t.Fatalf("versions %v", f["versions"])
			}
			if f := w.Next(); f.Str("type") != "closing" {
				t.Fatalf("got %v, want closing", f)
			}
			if st := w.Closed(); st != websocket.StatusPolicyViolation {
				t.Fatalf("close status %v", st)
			}
		})
	}
}

func TestWSBinaryFrameRejected(t *testing.T) {
	e := newEnv(t, nil)
	w := e.dialWS(gatewaytest.RConsumerHello)
	if err := w.C.Write(t.Context(), websocket.MessageBinary, []byte(`{"type":"ping"}`)); err != nil {
		t.Fatal(err)
	}
	if st := w.Closed(); st != websocket.StatusUnsupportedData {
		t.Fatalf("close status %v, want 1003", st)
	}
}

func TestWSPingPongAndUnknownFrames(t *testing.T) {
	e := newEnv(t, nil)
	w := e.dialWS(gatewaytest.RConsumerHello)
	w.Send(`{"type":"roster-v9","x":1}`)
	w.Send(`{"type":"ping","t":12345}`)
	if f := w.Next(); f.Str("type") != "pong" || f["t"] != float64(12345) {
		t.Fatalf("got %v, want pong t=12345", f)
	}
}

func TestWSServerPings(t *testing.T) {
	e := newEnv(t, func(c *dialectr.Config) { c.Ping = 100 * time.Millisecond })
	w := e.dialWS(gatewaytest.RConsumerHello)
	b := w.NextRaw() // the first frame, pings included
	var f gatewaytest.RFrame
	_ = json.Unmarshal(b, &f)
	if f.Str("type") != "ping" || f["t"] == nil {
		t.Fatalf("got %s, want a ping", b)
	}
}

// A refused subscribe is answered in-band; the connection and its other
// subscription go on.
func TestWSSubscribeErrorsInBand(t *testing.T) {
	e := newEnv(t, func(c *dialectr.Config) { c.MaxSubscriptions = 2 })
	w := e.dialWS(gatewaytest.RConsumerHello)
	w.Subscribe("live", `"filter":{"session":["s-1"]}`)
	refusals := []struct{ frame, id, code string }{
		{`{"type":"subscribe","id":"x1","filter":{"type":["tool.*.progress"]}}`, "x1", "invalid-filter"},
		{`{"type":"subscribe","id":"x2","filter":"not an object"}`, "x2", "invalid-filter"},
		{`{"type":"subscribe","id":"x3","capture":"secret"}`, "x3", "invalid-filter"},
		{`{"type":"subscribe","id":"x4","from":"ALL"}`, "x4", "invalid-filter"},
		{`{"type":"subscribe","id":"x5","from":[{"session":"s","seq":"x"}]}`, "x5", "invalid-filter"},
		{`{"type":"subscribe","id":"live"}`, "live", "invalid-filter"},
		{`{"type":"subscribe","id":7}`, "", "invalid-filter"},
		{`{"type":"subscribe","id":"x6","from":` + tooMany(65) + `}`, "x6", "limit-exceeded"},
	}
	var fx struct {
		Invalid []struct {
			Filter json.RawMessage `json:"filter"`
		} `json:"invalid"`
	}
	b, err := os.ReadFile("../../filtering/testdata/attr-match-cases.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &fx); err != nil || len(fx.Invalid) == 0 {
		t.Fatalf("fixture: %v", err)
	}
	for i, f := range fx.Invalid {
		id := fmt.Sprintf("fx%d", i)
		refusals = append(refusals, struct{ frame, id, code string }{`{"type":"subscribe","id":"` + id + `","filter":` + string(f.Filter) + `}`, id, "invalid-filter"})
	}
	for _, r := range refusals {
		w.Send(r.frame)
		f := w.Next()
		if f.Str("type") != "error" || f.Str("id") != r.id || f.Str("code") != r.code || f.Str("detail") == "" {
			t.Fatalf("%s: got %v, want error %s for %q", r.frame, f, r.code, r.id)
		}
	}
	w.Subscribe("second", `"filter":{"session":["s-2"]}`)
	w.Send(`{"type":"subscribe","id":"third"}`)
	if f := w.Next(); f.Str("code") != "limit-exceeded" || f.Str("id") != "third" {
		t.Fatalf("got %v, want limit-exceeded for the third subscription", f)
	}
	ev1, ev2 := rEvent("e-1", "s-1", 0, 0), rEvent("e-2", "s-2", 0, 0)
	e.post(ev1)
	if b := w.NextFrame(); string(b) != ev1 {
		t.Fatalf("got %s, want %s", b, ev1)
	}
	e.post(ev2)
	if b := w.NextFrame(); string(b) != ev2 {
		t.Fatalf("got %s, want %s", b, ev2)
	}
}

func TestWSResumeFromEveryPosition(t *testing.T) {
	e := newEnv(t, nil)
	order, raw := e.session("s-a", colocated("s-a", "s-b"))
	w := e.dialWS(gatewaytest.RConsumerHello)
	for i, p := range order {
		id := fmt.Sprintf("r%d", i)
		w.Subscribe(id, fmt.Sprintf(`"filter":{"session":["s-a","s-marker"]},"from":[{"session":"s-a","epoch":%d,"seq":%d}]`, p.epoch, p.seq))
		for _, q := range order[i+1:] {
			if b := w.NextFrame(); string(b) != raw[q] {
				t.Fatalf("from %v: got %s, want %s", p, b, raw[q])
			}
		}
		marker := rEvent(fmt.Sprintf("marker-%d", i), "s-marker", 0, i)
		e.post(marker)
		if b := w.NextFrame(); string(b) != marker {
			t.Fatalf("from %v: got %s, want the live marker", p, b)
		}
		w.Send(`{"type":"unsubscribe","id":"` + id + `"}`)
		if f := w.Next(); f.Str("type") != "unsubscribed" || f.Str("id") != id {
			t.Fatalf("got %v, want unsubscribed %s", f, id)
		}
	}
}

func TestWSReplayExhaustedFrame(t *testing.T) {
	e := newEnv(t, nil)
	e.getSSE(nil, nil).Close() // starts the tenant's indexer
	order, raw := e.session("s-a", "s-b")
	last := e.record("s-a-1-3")
	e.waitIndexed(last.Partition, last.Offset+1)
	e.deleteBefore(e.record("s-a-0-2"))
	w := e.dialWS(gatewaytest.RConsumerHello)
	w.Subscribe("r", `"from":[{"session":"s-a","epoch":0,"seq":0}]`)
	f := w.Next()
	if f.Str("type") != "replay-exhausted" || f.Str("sub") != "r" || f.Str("session") != "s-a" ||
		fmt.Sprint(f["earliest"]) != "map[epoch:0 seq:2]" {
		t.Fatalf("got %v, want replay-exhausted earliest 0:2", f)
	}
	for _, q := range order[2:] {
		if b := w.NextFrame(); string(b) != raw[q] {
			t.Fatalf("got %s, want %s", b, raw[q])
		}
	}
}

func TestWSEmitter(t *testing.T) {
	e := newEnv(t, nil)
	consumer := e.dialWS(gatewaytest.RConsumerHello)
	consumer.Subscribe("all", "")
	emitter := e.dialWS(`{"type":"hello","versions":["0.1"],"role":"emitter","identity":{"agent":"claude-code"}}`)
	bad := `{"aep":"0.1","id":"bad-1","type":"tool.requested"}`
	emitter.Send(bad)
	if f := emitter.Next(); f.Str("type") != "error" || f.Str("code") != "invalid-event" || f.Str("event") != "bad-1" {
		t.Fatalf("got %v, want invalid-event for bad-1", f)
	}
	ev := rEvent("ws-1", "s-ws", 0, 0)
	emitter.Send(ev)
	if b := consumer.NextFrame(); string(b) != ev {
		t.Fatalf("consumer got %s, want %s", b, ev)
	}
	// An emitter-only connection may not subscribe; a consumer may not emit.
	emitter.Send(`{"type":"subscribe","id":"s"}`)
	if f := emitter.Next(); f.Str("code") != "unauthorized" {
		t.Fatalf("got %v, want unauthorized", f)
	}
	consumer.Send(rEvent("ws-2", "s-ws", 0, 1))
	if f := consumer.Next(); f.Str("code") != "unauthorized" || f.Str("event") != "ws-2" {
		t.Fatalf("got %v, want unauthorized", f)
	}
}

// A frame with a dotted type that is not one JSON object is ignored like
// any unparseable frame (docs/relay.md): no error frame, nothing stored, the
// connection goes on.
func TestWSUnparseableEventFramesIgnored(t *testing.T) {
	e := newEnv(t, nil)
	consumer := e.dialWS(gatewaytest.RConsumerHello)
	consumer.Subscribe("all", "")
	emitter := e.dialWS(`{"type":"hello","versions":["0.1"],"role":"emitter","identity":{"agent":"claude-code"}}`)
	emitter.Send(`{"aep":"0.1","id":"u-1","type":"tool.requested","session":"s-ws","data":[1,2}`)
	emitter.Send(`{"aep":"0.1","id":"u-2","type":"tool.requested","session":"s-ws"} trailing`)
	emitter.Send(`{"type":"ping","t":7}`)
	if f := emitter.Next(); f.Str("type") != "pong" || f["t"] != float64(7) {
		t.Fatalf("got %v, want pong t=7 (the unparseable frames answered nothing)", f)
	}
	ev := rEvent("u-3", "s-ws", 0, 0)
	emitter.Send(ev)
	if b := consumer.NextFrame(); string(b) != ev {
		t.Fatalf("consumer got %s, want %s (the first event stored)", b, ev)
	}
}

func TestWSCapture(t *testing.T) {
	e := newEnv(t, nil)
	w := e.dialWS(gatewaytest.RConsumerHello)
	w.Subscribe("none", `"capture":"none"`)
	ev := rEvent("c-1", "s-c", 0, 0)
	e.post(ev)
	var got map[string]any
	if err := json.Unmarshal(w.NextFrame(), &got); err != nil {
		t.Fatal(err)
	}
	if got["capture"] != "none" || got["data"] != nil || got["id"] != "c-1" {
		t.Fatalf("got %v, want c-1 down-levelled to none", got)
	}
}

// Close sends closing with the last delivered position per subscription
// and session, then closes 1001.
func TestWSClosingOnShutdown(t *testing.T) {
	e := newEnv(t, nil)
	w := e.dialWS(gatewaytest.RConsumerHello)
	w.Subscribe("a", `"filter":{"session":["s-1"]}`)
	w.Subscribe("b", "")
	e.post(rEvent("1", "s-1", 0, 0), rEvent("2", "s-1", 2, 5))
	for range 4 { // both events on both subscriptions
		w.NextFrame()
	}
	_ = e.relay.Shutdown(context.Background())
	var cf struct {
		Type      string
		Reason    string
		Delivered []struct {
			Sub, Session string
			Epoch, Seq   int64
		}
	}
	if err := json.Unmarshal(w.NextFrame(), &cf); err != nil {
		t.Fatal(err)
	}
	// Subscriptions are listed in first-delivery order, which between two
	// pumps is a race: compare as a set.
	sort.Slice(cf.Delivered, func(i, j int) bool { return cf.Delivered[i].Sub < cf.Delivered[j].Sub })
	if cf.Type != "closing" || cf.Reason == "" || fmt.Sprint(cf.Delivered) != "[{a s-1 2 5} {b s-1 2 5}]" {
		t.Fatalf("closing frame %+v", cf)
	}
	if st := w.Closed(); st != websocket.StatusGoingAway {
		t.Fatalf("close status %v", st)
	}
}

// A peer that answers nothing for three ping periods is closed, after a
// closing frame; so is one that never says hello.
func TestWSSilentPeerClosed(t *testing.T) {
	e := newEnv(t, func(c *dialectr.Config) { c.Ping = 100 * time.Millisecond })
	for _, hello := range []string{gatewaytest.RConsumerHello, ""} {
		w := e.dialWS(hello)
		for {
			f := w.Next()
			if f.Str("type") == "closing" {
				break
			}
			t.Fatalf("got %v, want closing", f)
		}
		if st := w.Closed(); st != websocket.StatusPolicyViolation {
			t.Fatalf("close status %v, want 1008", st)
		}
	}
}

func TestWSReplayAll(t *testing.T) {
	e := newEnv(t, nil)
	ev0, ev1 := rEvent("all-0", "s-all", 0, 0), rEvent("all-1", "s-all", 0, 1)
	e.post(ev0, ev1)
	w := e.dialWS(gatewaytest.RConsumerHello)
	w.Subscribe("all", `"from":"all","filter":{"session":["s-all"]}`)
	for _, want := range []string{ev0, ev1} {
		if b := w.NextFrame(); string(b) != want {
			t.Fatalf("got %s, want %s", b, want)
		}
	}
	ev2 := rEvent("all-2", "s-all", 0, 2)
	e.post(ev2)
	if b := w.NextFrame(); string(b) != ev2 {
		t.Fatalf("live: got %s, want %s", b, ev2)
	}
}

// Every WebSocket subscription beyond a connection's first takes a place
// under the tenant's stream cap, given back when it ends (issue 31).
func TestWSSubscriptionsCountTowardTheStreamCap(t *testing.T) {
	hub := transport.NewHub(2)
	e := newEnv(t, func(c *dialectr.Config) { c.Hub = hub })
	w := e.dialWS(gatewaytest.RConsumerHello)
	w.Subscribe("a", "") // rides on the connection's place
	w.Subscribe("b", "") // the second place
	w.Send(`{"type":"subscribe","id":"c"}`)
	if f := w.Next(); f.Str("type") != "error" || f.Str("code") != "limit-exceeded" || f.Str("id") != "c" ||
		!strings.Contains(f.Str("detail"), "max-streams-per-tenant") {
		t.Fatalf("a third subscription at a cap of 2: %v", f)
	}
	w.Send(`{"type":"unsubscribe","id":"b"}`)
	if f := w.Next(); f.Str("type") != "unsubscribed" || f.Str("id") != "b" {
		t.Fatalf("unsubscribe: %v", f)
	}
	w.Subscribe("c", "") // b's place is free again
	w.Close()
	gatewaytest.Poll(t, "every place given back", func() bool { return hub.Open("default") == 0 })
}
