package dialectr_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aep-gateway/aep-gateway/gateway/dialectr"
)

func TestWSHelloNegotiates(t *testing.T) {
	e := newEnv(t, nil)
	w := e.dialWS("")
	w.send(`{"type":"hello","versions":["0.9","0.1"],"role":"both","identity":{"agent":"a"},"capabilities":{"unknown":{"x":1}}}`)
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
	if err := json.Unmarshal(w.nextRaw(), &h); err != nil {
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
			w.send(c.first)
			f := w.next()
			if f.str("type") != "error" || f.str("code") != c.code || f.str("detail") == "" {
				t.Fatalf("got %v, want error %s", f, c.code)
			}
			if c.code == "version-unsupported" && fmt.Sprint(f["versions"]) != "[0.1]" {
				t.Fatalf("versions %v", f["versions"])
			}
			if f := w.next(); f.str("type") != "closing" {
				t.Fatalf("got %v, want closing", f)
			}
			if st := w.closed(); st != websocket.StatusPolicyViolation {
				t.Fatalf("close status %v", st)
			}
		})
	}
}

func TestWSBinaryFrameRejected(t *testing.T) {
	e := newEnv(t, nil)
	w := e.dialWS(consumerHello)
	if err := w.c.Write(t.Context(), websocket.MessageBinary, []byte(`{"type":"ping"}`)); err != nil {
		t.Fatal(err)
	}
	if st := w.closed(); st != websocket.StatusUnsupportedData {
		t.Fatalf("close status %v, want 1003", st)
	}
}

func TestWSPingPongAndUnknownFrames(t *testing.T) {
	e := newEnv(t, nil)
	w := e.dialWS(consumerHello)
	w.send(`{"type":"roster-v9","x":1}`)
	w.send(`{"type":"ping","t":12345}`)
	if f := w.next(); f.str("type") != "pong" || f["t"] != float64(12345) {
		t.Fatalf("got %v, want pong t=12345", f)
	}
}

func TestWSServerPings(t *testing.T) {
	e := newEnv(t, func(c *dialectr.Config) { c.Ping = 100 * time.Millisecond })
	w := e.dialWS(consumerHello)
	var b []byte
	select {
	case b = <-w.frames:
	case <-time.After(waitFor):
		t.Fatal("no frame")
	}
	var f frame
	_ = json.Unmarshal(b, &f)
	if f.str("type") != "ping" || f["t"] == nil {
		t.Fatalf("got %s, want a ping", b)
	}
}

// A refused subscribe is answered in-band; the connection and its other
// subscription go on.
func TestWSSubscribeErrorsInBand(t *testing.T) {
	e := newEnv(t, func(c *dialectr.Config) { c.MaxSubscriptions = 2 })
	w := e.dialWS(consumerHello)
	w.subscribe("live", `"filter":{"session":["s-1"]}`)
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
		w.send(r.frame)
		f := w.next()
		if f.str("type") != "error" || f.str("id") != r.id || f.str("code") != r.code || f.str("detail") == "" {
			t.Fatalf("%s: got %v, want error %s for %q", r.frame, f, r.code, r.id)
		}
	}
	w.subscribe("second", `"filter":{"session":["s-2"]}`)
	w.send(`{"type":"subscribe","id":"third"}`)
	if f := w.next(); f.str("code") != "limit-exceeded" || f.str("id") != "third" {
		t.Fatalf("got %v, want limit-exceeded for the third subscription", f)
	}
	ev1, ev2 := rEvent("e-1", "s-1", 0, 0), rEvent("e-2", "s-2", 0, 0)
	e.post(ev1)
	if b := w.nextRaw(); string(b) != ev1 {
		t.Fatalf("got %s, want %s", b, ev1)
	}
	e.post(ev2)
	if b := w.nextRaw(); string(b) != ev2 {
		t.Fatalf("got %s, want %s", b, ev2)
	}
}

func TestWSResumeFromEveryPosition(t *testing.T) {
	e := newEnv(t, nil)
	order, raw := e.session("s-a", colocated("s-a", "s-b"))
	w := e.dialWS(consumerHello)
	for i, p := range order {
		id := fmt.Sprintf("r%d", i)
		w.subscribe(id, fmt.Sprintf(`"filter":{"session":["s-a","s-marker"]},"from":[{"session":"s-a","epoch":%d,"seq":%d}]`, p.epoch, p.seq))
		for _, q := range order[i+1:] {
			if b := w.nextRaw(); string(b) != raw[q] {
				t.Fatalf("from %v: got %s, want %s", p, b, raw[q])
			}
		}
		marker := rEvent(fmt.Sprintf("marker-%d", i), "s-marker", 0, i)
		e.post(marker)
		if b := w.nextRaw(); string(b) != marker {
			t.Fatalf("from %v: got %s, want the live marker", p, b)
		}
		w.send(`{"type":"unsubscribe","id":"` + id + `"}`)
		if f := w.next(); f.str("type") != "unsubscribed" || f.str("id") != id {
			t.Fatalf("got %v, want unsubscribed %s", f, id)
		}
	}
}

func TestWSReplayExhaustedFrame(t *testing.T) {
	e := newEnv(t, nil)
	e.getSSE(nil, nil).close() // starts the tenant's indexer
	order, raw := e.session("s-a", "s-b")
	last := e.record("s-a-1-3")
	e.waitIndexed(last.Partition, last.Offset+1)
	e.deleteBefore(e.record("s-a-0-2"))
	w := e.dialWS(consumerHello)
	w.subscribe("r", `"from":[{"session":"s-a","epoch":0,"seq":0}]`)
	f := w.next()
	if f.str("type") != "replay-exhausted" || f.str("sub") != "r" || f.str("session") != "s-a" ||
		fmt.Sprint(f["earliest"]) != "map[epoch:0 seq:2]" {
		t.Fatalf("got %v, want replay-exhausted earliest 0:2", f)
	}
	for _, q := range order[2:] {
		if b := w.nextRaw(); string(b) != raw[q] {
			t.Fatalf("got %s, want %s", b, raw[q])
		}
	}
}

func TestWSEmitter(t *testing.T) {
	e := newEnv(t, nil)
	consumer := e.dialWS(consumerHello)
	consumer.subscribe("all", "")
	emitter := e.dialWS(`{"type":"hello","versions":["0.1"],"role":"emitter","identity":{"agent":"claude-code"}}`)
	bad := `{"aep":"0.1","id":"bad-1","type":"tool.requested"}`
	emitter.send(bad)
	if f := emitter.next(); f.str("type") != "error" || f.str("code") != "invalid-event" || f.str("event") != "bad-1" {
		t.Fatalf("got %v, want invalid-event for bad-1", f)
	}
	ev := rEvent("ws-1", "s-ws", 0, 0)
	emitter.send(ev)
	if b := consumer.nextRaw(); string(b) != ev {
		t.Fatalf("consumer got %s, want %s", b, ev)
	}
	// An emitter-only connection may not subscribe; a consumer may not emit.
	emitter.send(`{"type":"subscribe","id":"s"}`)
	if f := emitter.next(); f.str("code") != "unauthorized" {
		t.Fatalf("got %v, want unauthorized", f)
	}
	consumer.send(rEvent("ws-2", "s-ws", 0, 1))
	if f := consumer.next(); f.str("code") != "unauthorized" || f.str("event") != "ws-2" {
		t.Fatalf("got %v, want unauthorized", f)
	}
}

func TestWSCapture(t *testing.T) {
	e := newEnv(t, nil)
	w := e.dialWS(consumerHello)
	w.subscribe("none", `"capture":"none"`)
	ev := rEvent("c-1", "s-c", 0, 0)
	e.post(ev)
	var got map[string]any
	if err := json.Unmarshal(w.nextRaw(), &got); err != nil {
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
	w := e.dialWS(consumerHello)
	w.subscribe("a", `"filter":{"session":["s-1"]}`)
	w.subscribe("b", "")
	e.post(rEvent("1", "s-1", 0, 0), rEvent("2", "s-1", 2, 5))
	for range 4 { // both events on both subscriptions
		w.nextRaw()
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
	if err := json.Unmarshal(w.nextRaw(), &cf); err != nil {
		t.Fatal(err)
	}
	// Subscriptions are listed in first-delivery order, which between two
	// pumps is a race: compare as a set.
	sort.Slice(cf.Delivered, func(i, j int) bool { return cf.Delivered[i].Sub < cf.Delivered[j].Sub })
	if cf.Type != "closing" || cf.Reason == "" || fmt.Sprint(cf.Delivered) != "[{a s-1 2 5} {b s-1 2 5}]" {
		t.Fatalf("closing frame %+v", cf)
	}
	if st := w.closed(); st != websocket.StatusGoingAway {
		t.Fatalf("close status %v", st)
	}
}

// A peer that answers nothing for three ping periods is closed, after a
// closing frame; so is one that never says hello.
func TestWSSilentPeerClosed(t *testing.T) {
	e := newEnv(t, func(c *dialectr.Config) { c.Ping = 100 * time.Millisecond })
	for _, hello := range []string{consumerHello, ""} {
		w := e.dialWS(hello)
		for {
			f := w.next()
			if f.str("type") == "closing" {
				break
			}
			t.Fatalf("got %v, want closing", f)
		}
		if st := w.closed(); st != websocket.StatusPolicyViolation {
			t.Fatalf("close status %v, want 1008", st)
		}
	}
}

func TestWSReplayAll(t *testing.T) {
	e := newEnv(t, nil)
	ev0, ev1 := rEvent("all-0", "s-all", 0, 0), rEvent("all-1", "s-all", 0, 1)
	e.post(ev0, ev1)
	w := e.dialWS(consumerHello)
	w.subscribe("all", `"from":"all","filter":{"session":["s-all"]}`)
	for _, want := range []string{ev0, ev1} {
		if b := w.nextRaw(); string(b) != want {
			t.Fatalf("got %s, want %s", b, want)
		}
	}
	ev2 := rEvent("all-2", "s-all", 0, 2)
	e.post(ev2)
	if b := w.nextRaw(); string(b) != ev2 {
		t.Fatalf("live: got %s, want %s", b, ev2)
	}
}
