package dialectr

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
)

func TestParseFrom(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string // fmt of positions, or the error code
	}{
		{`[]`, "[]"},
		{`[{"session":"s","epoch":1,"seq":2}]`, "[s:1:2]"},
		{`[{"session":"s","seq":2}]`, "[s:0:2]"},
		{`[{"session":"a:b","epoch":0,"seq":0},{"session":"c","epoch":3,"seq":9}]`, "[a:b:0:0 c:3:9]"},
		{`[{"session":"s","epoch":2,"seq":0},{"session":"s","epoch":1,"seq":7}]`, "[s:1:7]"},
		{`[{"session":"s","epoch":1,"seq":7},{"session":"s","epoch":2,"seq":0}]`, "[s:1:7]"},
		{` [{"session":"s","seq":1,"extra":true}] `, "[s:0:1]"},
		{`all`, "all"},
		{` "all" `, "all"},
		{`"ALL"`, "invalid-filter"},
		{`null`, "invalid-filter"},
		{`{}`, "invalid-filter"},
		{`[1]`, "invalid-filter"},
		{`[{"session":"s"}]`, "invalid-filter"},
		{`[{"seq":1}]`, "invalid-filter"},
		{`[{"session":"","seq":1}]`, "invalid-filter"},
		{`[{"session":"s","seq":1.5}]`, "invalid-filter"},
		{`[{"session":"s","seq":-1}]`, "invalid-filter"},
		{`[{"session":"s","seq":1,"epoch":-1}]`, "invalid-filter"},
		{`[{"session":"s","seq":99999999999999999999}]`, "invalid-filter"},
		{`[{"session":` + jsonString(strings.Repeat("x", cursor.MaxSessionLen+1)) + `,"seq":1}]`, "invalid-filter"},
		{`[{"session":"s","seq":1},`, "invalid-filter"},
		{"[" + strings.Repeat(`{"session":"s","seq":1},`, 3) + `{"session":"s","seq":1}]`, "limit-exceeded"},
	} {
		got, all, err := parseFrom([]byte(c.in), 3)
		var s string
		if all {
			s = "all"
			if got != nil || err != nil {
				t.Errorf("%s: all with %v %v", c.in, got, err)
			}
		} else if err != nil {
			s = err.Code
			if err.Detail == "" {
				t.Errorf("%s: empty detail", c.in)
			}
		} else {
			parts := make([]string, len(got))
			for i, p := range got {
				parts[i] = p.String()
			}
			s = "[" + strings.Join(parts, " ") + "]"
		}
		if s != c.want {
			t.Errorf("parseFrom(%s) = %s, want %s", c.in, s, c.want)
		}
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestAcceptsEventStream(t *testing.T) {
	for _, c := range []struct {
		vals []string
		want bool
	}{
		{nil, true},
		{[]string{"text/event-stream"}, true},
		{[]string{"application/json, text/event-stream;q=0.9"}, true},
		{[]string{"*/*"}, true},
		{[]string{"TEXT/*"}, true},
		{[]string{"application/json"}, false},
		{[]string{"text/html", "application/xml"}, false},
	} {
		if got := acceptsEventStream(c.vals); got != c.want {
			t.Errorf("%q: %v, want %v", c.vals, got, c.want)
		}
	}
}

func TestAppendSSEMessage(t *testing.T) {
	for _, c := range []struct {
		name string
		a    aep.Attrs
		raw  string
		want string
	}{
		{"session-scoped", aep.Attrs{Type: "tool.requested", Session: "s:1", Epoch: 2, HasEpoch: true, Seq: 9, HasSeq: true}, `{"a":1}`,
			"event: tool.requested\ndata: {\"a\":1}\nid: s:1:2:9\n\n"},
		{"epoch absent is 0", aep.Attrs{Type: "t.x", Session: "s", Seq: 3, HasSeq: true}, `{}`,
			"event: t.x\ndata: {}\nid: s:0:3\n\n"},
		{"agent-scoped", aep.Attrs{Type: "agent.heartbeat"}, `{}`, "event: agent.heartbeat\ndata: {}\n\n"},
		{"session without seq", aep.Attrs{Type: "t.x", Session: "s"}, `{}`, "event: t.x\ndata: {}\n\n"},
		{"session with a newline", aep.Attrs{Type: "t.x", Session: "s\nid: evil", Seq: 1, HasSeq: true}, `{}`, "event: t.x\ndata: {}\n\n"},
		{"pretty-printed event", aep.Attrs{Type: "t.x"}, "{\r\n  \"a\": \"b\\nc\"\n}", "event: t.x\ndata: {    \"a\": \"b\\nc\" }\n\n"},
	} {
		if got := string(appendSSEMessage(nil, &c.a, []byte(c.raw))); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

func TestAppendExhaustedComment(t *testing.T) {
	got := string(appendExhaustedComment(nil, exhausted{Session: "s-1", Earliest: &cursor.Position{Session: "s-1", Epoch: 2, Seq: 40}}))
	if got != ": replay-exhausted s-1 2:40\n\n" {
		t.Errorf("got %q", got)
	}
	if got := string(appendExhaustedComment(nil, exhausted{Session: "s\n2"})); got != ": replay-exhausted s 2\n\n" {
		t.Errorf("no earliest: got %q", got)
	}
}

func gateEvent(p int32, off int64, source, id, session string, epoch, seq int64, hasSeq bool) *engine.Event {
	return &engine.Event{
		Record: &kgo.Record{Partition: p, Offset: off},
		Attrs:  aep.Attrs{Dialect: aep.DialectR, Source: source, ID: id, Session: session, Epoch: epoch, HasEpoch: epoch != 0, Seq: seq, HasSeq: hasSeq},
	}
}

func TestReplayGate(t *testing.T) {
	g := testGate(map[string]cursor.Position{"a": {Session: "a", Epoch: 1, Seq: 5}}, []int64{100, 50}, 2, 0)
	for i, c := range []struct {
		ev   *engine.Event
		want bool
	}{
		{gateEvent(0, 10, "src", "1", "a", 1, 5, true), false}, // at the position
		{gateEvent(0, 11, "src", "2", "a", 1, 4, true), false}, // before it
		{gateEvent(0, 12, "src", "3", "a", 0, 9, true), false}, // older epoch
		{gateEvent(0, 13, "src", "4", "a", 1, 6, true), true},
		{gateEvent(0, 14, "src", "4", "a", 1, 6, true), false},  // duplicate (source, id)
		{gateEvent(0, 15, "other", "4", "a", 1, 6, true), true}, // same id, other source
		{gateEvent(0, 16, "src", "5", "a", 2, 0, true), true},   // new epoch
		{gateEvent(0, 17, "src", "6", "a", 2, 1, false), true},  // no seq: after the resolved offset
		{gateEvent(0, 9, "src", "6b", "a", 2, 1, false), false}, // no seq: before it
		{gateEvent(0, 18, "src", "7", "b", 9, 9, true), false},  // not named
		{gateEvent(0, 100, "src", "8", "b", 0, 0, true), true},  // live from the request
		{gateEvent(0, 101, "src", "1", "a", 1, 5, true), true},  // live: as received
		{gateEvent(1, 49, "src", "9", "a", 3, 0, true), true},   // dedupe memory full: passes
		{gateEvent(1, 49, "src", "9", "a", 3, 0, true), true},
		{gateEvent(7, 0, "src", "10", "z", 0, 0, true), true}, // partition the plan did not know
	} {
		if got := len(g.offer(c.ev, nil)) == 1; got != c.want {
			t.Errorf("case %d (%+v at %d/%d): %v, want %v", i, c.ev.Attrs, c.ev.Record.Partition, c.ev.Record.Offset, got, c.want)
		}
	}
	if len(g.seen) != 2 {
		t.Errorf("dedupe memory holds %d, want its bound 2", len(g.seen))
	}
}

// testGate is a gate for the named positions, in a fixed order.
func testGate(positions map[string]cursor.Position, liveFrom []int64, dedupe, buffer int) *replayGate {
	g := &replayGate{sessions: map[string]*heldSession{}, liveFrom: liveFrom, seen: map[dedupeKey]struct{}{}, max: dedupe, buffer: buffer}
	for s, p := range positions {
		g.sessions[s] = &heldSession{pos: p, from: 10} // resolved offset 10
		g.order = append(g.order, s)
	}
	slices.Sort(g.order)
	return g
}

// describe renders gate output as "!a@1:4" (marker, earliest) and "a:5"
// (event) tokens.
func describe(items []gateItem) string {
	var b strings.Builder
	for _, it := range items {
		if it.mark != nil {
			fmt.Fprintf(&b, "!%s@%d:%d ", it.mark.Session, it.mark.Earliest.Epoch, it.mark.Earliest.Seq)
			continue
		}
		fmt.Fprintf(&b, "%s:%d ", it.ev.Attrs.Session, it.ev.Attrs.Seq)
	}
	return strings.TrimSpace(b.String())
}

// TestReplayGateHeldWindow: a named session keeps at most buffer replayed
// events; a position predating them gets replay-exhausted naming the
// first held, then the held window; a position inside it gets no marker.
func TestReplayGateHeldWindow(t *testing.T) {
	g := testGate(map[string]cursor.Position{
		"a": {Session: "a", Epoch: 1, Seq: 0}, // predates the window of 3
		"b": {Session: "b", Epoch: 1, Seq: 3}, // inside it
	}, []int64{100}, 1024, 3)
	var out []gateItem
	for seq := int64(0); seq <= 6; seq++ {
		out = g.offer(gateEvent(0, seq*2, "src", fmt.Sprint("a", seq), "a", 1, seq, true), out)
		out = g.offer(gateEvent(0, seq*2+1, "src", fmt.Sprint("b", seq), "b", 1, seq, true), out)
	}
	if len(out) != 0 {
		t.Fatalf("replayed events went out before the catch-up ended: %s", describe(out))
	}
	// b's first live event flushes b's window first.
	out = g.offer(gateEvent(0, 100, "src", "b7", "b", 1, 7, true), out)
	if got, want := describe(out), "b:4 b:5 b:6 b:7"; got != want {
		t.Errorf("b at its first live event: %q, want %q", got, want)
	}
	if got, want := describe(g.flush(nil)), "!a@1:4 a:4 a:5 a:6"; got != want {
		t.Errorf("flush: %q, want %q", got, want)
	}
	if got, want := describe(g.offer(gateEvent(0, 101, "src", "a7", "a", 1, 7, true), nil)), "a:7"; got != want {
		t.Errorf("live after the flush: %q, want %q", got, want)
	}
	g.noLive = true
	if got := g.offer(gateEvent(0, 102, "src", "a8", "a", 1, 8, true), nil); len(got) != 0 {
		t.Errorf("live=0 let a live event out: %s", describe(got))
	}
}

// FuzzParseFrom: any input is a list of valid positions or a refusal with
// a closed-set code, never a panic.
func FuzzParseFrom(f *testing.F) {
	for _, s := range []string{`[]`, `all`, `[{"session":"s","epoch":1,"seq":2}]`, `[{"session":"s","seq":-1}]`, `[{"session":1}]`, `[null]`, `{"a":1}`, `[{"session":"s","seq":1e3}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, all, err := parseFrom(b, 8)
		if all {
			return
		}
		if err != nil {
			if err.Code != aep.CodeRInvalidFilter && err.Code != aep.CodeRLimitExceeded {
				t.Fatalf("code %q", err.Code)
			}
			return
		}
		seen := map[string]bool{}
		for _, p := range ps {
			if p.Session == "" || p.Epoch < 0 || p.Seq < 0 || seen[p.Session] || len(p.Session) > cursor.MaxSessionLen {
				t.Fatalf("bad position %+v in %v", p, ps)
			}
			seen[p.Session] = true
		}
		if len(ps) > 8 {
			t.Fatalf("%d positions past the limit", len(ps))
		}
	})
}

// FuzzSubscribeFrame: any text frame after hello parses into a subscription
// or a closed-set refusal, never a panic.
func FuzzSubscribeFrame(f *testing.F) {
	for _, s := range []string{
		`{"type":"subscribe","id":"s1","filter":{"type":["attention.*"],"severity":{"gte":"notice"}},"from":[{"session":"s_8f2c","epoch":3,"seq":187}],"capture":"metadata"}`,
		`{"type":"subscribe","id":"s1","filter":null,"from":null,"capture":null}`,
		`{"type":"subscribe","id":"s1","from":"all"}`,
		`{"type":"subscribe","id":"s1","capture":5}`,
		`{"type":"subscribe","id":"s1","filter":[1]}`,
	} {
		f.Add([]byte(s))
	}
	c := &wsConn{rl: &Relay{cfg: Config{MaxFrom: 8}}}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr inFrame
		if json.Unmarshal(b, &fr) != nil {
			return
		}
		sp, err := c.subParams(&fr)
		if err != nil {
			switch err.Code {
			case aep.CodeRInvalidFilter, aep.CodeRLimitExceeded:
			default:
				t.Fatalf("code %q", err.Code)
			}
			return
		}
		if sp.filter == nil || (sp.ceiling != 0 && !sp.ceiling.Valid()) {
			t.Fatalf("accepted %s as %+v", b, sp)
		}
	})
}

func BenchmarkSSEMessage(b *testing.B) {
	raw := []byte(fmt.Sprintf(`{"aep":"0.1","id":"01JX9YB0AAAA00000000000001","type":"tool.requested","time":"2026-07-03T10:14:00.000Z","source":"aep://host-a/agent/claude-code/session/s","agent":"claude-code","session":"s","seq":%d,"epoch":0,"subject":"Bash","severity":"info","data":{"tool":{"name":"Bash","args":%q}}}`, 1, strings.Repeat("x", 200)))
	a := aep.Attrs{Dialect: aep.DialectR, Type: "tool.requested", Session: "s", Seq: 1, HasSeq: true}
	b.Run("baseline-copy", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(raw)))
		var buf []byte
		for b.Loop() {
			buf = append(buf[:0], raw...)
		}
	})
	b.Run("frame", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(raw)))
		var buf []byte
		for b.Loop() {
			buf = appendSSEMessage(buf[:0], &a, raw)
		}
	})
	rl := &Relay{}
	ev := &engine.Event{Record: &kgo.Record{Value: raw}, Attrs: a}
	b.Run("ceiling-full-no-downlevel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if _, err := rl.eventBytes(ev, aep.CaptureFull); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ceiling-none-downlevel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if _, err := rl.eventBytes(ev, aep.CaptureNone); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkReplayGate(b *testing.B) {
	g := testGate(map[string]cursor.Position{"a": {Session: "a", Epoch: 0, Seq: 0}}, []int64{1 << 40}, DefaultDedupe, 0)
	var out []gateItem
	evs := make([]*engine.Event, 4096)
	for i := range evs {
		evs[i] = gateEvent(0, int64(i), "aep://h/agent/a", fmt.Sprintf("id-%d", i), "a", 0, int64(i+1), true)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%len(evs) == 0 {
			clear(g.seen)
		}
		out = g.offer(evs[i%len(evs)], out[:0])
		i++
	}
}
