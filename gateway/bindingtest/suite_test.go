// Package bindingtest is the binding conformance suite: the same cases run
// over the four streaming bindings of the gateway, SSE-D (GET /aep/events),
// WS-D (GET /aep, subprotocol aep-0.1), SSE-R (GET /stream) and WS-R
// (GET /socket), each in both live-delivery modes (tail, and workers with an
// in-process filter worker), over real sockets against a gateway on kfake.
// Each binding has a small adapter (open a stream with a filter and a
// resume point, read its next message normalized, wait for a heartbeat,
// read its end); stack_test.go is the only file that knows the binding
// packages.
package bindingtest

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// dialect is the wire dialect a binding speaks.
type dialect string

const (
	dialectD dialect = "D"
	dialectR dialect = "R"
)

// kind classifies a normalized stream message.
type kind int

const (
	kindEvent     kind = iota // a delivered event
	kindHeartbeat             // SSE heartbeat comment, R ping frame
	kindReplayed              // D event.replayed (gaps: the retention gaps it names)
	kindExhausted             // R replay-exhausted (gaps: the session and earliest position)
	kindOther                 // anything else, kept raw
)

func (k kind) String() string {
	return [...]string{"event", "heartbeat", "event.replayed", "replay-exhausted", "other"}[k]
}

// msg is one normalized message of a stream.
type msg struct {
	kind    kind
	id      string   // the event's id
	session string   // the event's session
	seq     int      // the event's seq (R) / payload.seq (D)
	token   string   // resume token after this message ("" if none)
	data    []byte   // the event as delivered
	gaps    []string // kindReplayed, kindExhausted: normalized gap descriptions
	raw     string   // the message as received, for failure messages
}

// openOpts say what stream to open.
type openOpts struct {
	session  string // only this session's events; "" for all
	from     string // resume token to start after; "" for live
	lossless bool   // D: delivery_mode=replayable (R streams are always lossless)
	// slow, when set, opens the stream from one of its clients (small
	// socket buffers) and reads nothing ahead of the test: a test that
	// stops reading stalls the stream.
	slow *gatewaytest.SmallSockets
	// ahead is how many messages the client reads ahead of the test
	// (ignored with slow).
	ahead int
}

// stream is an open stream of one binding.
type stream interface {
	// tryNext returns the next message within d, false if none came;
	// it fails t if the stream ends.
	tryNext(t *testing.T, d time.Duration) (msg, bool)
	// heartbeat waits for the binding's heartbeat on an idle stream.
	heartbeat(t *testing.T)
	// end reads the rest of the stream, failing t if it has not ended
	// within d, and returns what came and how it ended, normalized (see
	// binding.closing).
	end(t *testing.T, d time.Duration) ([]msg, string)
}

// binding is one streaming binding under test.
type binding struct {
	name    string
	dialect dialect
	open    func(t *testing.T, s *stack, o openOpts) stream
	// closing is how end reports a stream the gateway shut down.
	closing string
	// refuse opens a stream that must be refused and reports how, as
	// refused says.
	refuse  func(t *testing.T, s *stack, o openOpts) string
	refused string
	// mode is how live events reach the stack's node (set by forEach).
	mode engine.LiveDelivery
}

// modes are the live-delivery modes every case runs in: the shared tail
// reader, and filter workers forwarding to the node (docs/scaling.md).
var modes = []engine.LiveDelivery{engine.LiveTail, engine.LiveWorkers}

var bindings = []binding{
	{name: "SSE-D", dialect: dialectD, open: openSSED, closing: closingSSED,
		refuse: refuseSSED, refused: "400 subscription_rejected"},
	{name: "WS-D", dialect: dialectD, open: openWSD, closing: closingWSD,
		refuse: refuseWSD, refused: "subscription.rejected subscription_rejected"},
	{name: "SSE-R", dialect: dialectR, open: openSSER, closing: closingSSER,
		refuse: refuseSSER, refused: "400 invalid-filter"},
	{name: "WS-R", dialect: dialectR, open: openWSR, closing: closingWSR,
		refuse: refuseWSR, refused: "error invalid-filter"},
}

// forEach runs f as a subtest per binding and live-delivery mode
// ("SSE-D/tail", "SSE-D/workers", ...), in parallel: the stacks are
// independent and most of a case's time is spent waiting on Kafka fetches.
func forEach(t *testing.T, f func(t *testing.T, b binding)) {
	t.Helper()
	for _, b := range bindings {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for _, m := range modes {
				bm := b
				bm.mode = m
				t.Run(string(m), func(t *testing.T) {
					t.Parallel()
					if bm.mode != m {
						t.Fatalf("binding runs in mode %s, want %s", bm.mode, m)
					}
					f(t, bm)
				})
			}
		})
	}
}

// next returns st's next message, failing t if the stream ends or nothing
// comes within gatewaytest.Wait.
func next(t *testing.T, st stream) msg {
	t.Helper()
	m, ok := st.tryNext(t, gatewaytest.Wait)
	if !ok {
		t.Fatalf("no message within %v", gatewaytest.Wait)
	}
	return m
}

// events reads the next n events, skipping heartbeats and event.replayed
// notices that name no gap; anything else fails t.
func events(t *testing.T, st stream, n int) []msg {
	t.Helper()
	out := make([]msg, 0, n)
	for len(out) < n {
		m := next(t, st)
		switch {
		case m.kind == kindEvent:
			out = append(out, m)
		case m.kind == kindHeartbeat, m.kind == kindReplayed && len(m.gaps) == 0:
		default:
			t.Fatalf("after %d events: unexpected %v: %s", len(out), m.kind, m.raw)
		}
	}
	return out
}

// expectSeqs requires evs to be session's events at seqs [from, to), in
// order, once each.
func expectSeqs(t *testing.T, evs []msg, session string, from, to int) {
	t.Helper()
	if len(evs) != to-from {
		t.Fatalf("%d events, want %d", len(evs), to-from)
	}
	for i, m := range evs {
		if m.session != session || m.seq != from+i {
			t.Fatalf("event %d is %s:%d, want %s:%d", i, m.session, m.seq, session, from+i)
		}
	}
}

// expectBytes requires a delivered event to be what was sent: dialect R
// byte-identical; dialect D the sent members, byte-identical, plus the
// delivery object the gateway stamps.
func expectBytes(t *testing.T, d dialect, sent string, got msg) {
	t.Helper()
	if d == dialectR {
		if string(got.data) != sent {
			t.Fatalf("not byte-identical:\n got %s\nwant %s", got.data, sent)
		}
		return
	}
	var want, have map[string]json.RawMessage
	if err := json.Unmarshal([]byte(sent), &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(got.data, &have); err != nil {
		t.Fatalf("delivered %s: %v", got.data, err)
	}
	if _, ok := have["delivery"]; !ok {
		t.Fatalf("no delivery object: %s", got.data)
	}
	delete(have, "delivery")
	if len(have) != len(want) {
		t.Fatalf("members differ:\n got %s\nwant %s", got.data, sent)
	}
	for k, v := range want {
		if !bytes.Equal(have[k], v) {
			t.Fatalf("member %s: got %s, want %s", k, have[k], v)
		}
	}
}
