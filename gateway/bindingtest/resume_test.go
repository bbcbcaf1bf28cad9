package bindingtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// A stream resumed after an event delivers exactly the events after it,
// published before and after the resume, then live ones: no duplicate, no
// gap, no gap marker.
func TestResumeFromPosition(t *testing.T) {
	forEach(t, func(t *testing.T, b binding) {
		s := newStack(t, b.mode, stackConfig{})
		const session = "sess_resume"
		first := b.open(t, s, openOpts{session: session, lossless: true, ahead: 64})
		sent := publish(t, s, b.dialect, session, 0, 6, 0)
		evs := events(t, first, 6)
		expectSeqs(t, evs, session, 0, 6)
		for seq, ev := range publish(t, s, b.dialect, session, 6, 9, 0) {
			sent[seq] = ev
		}
		if evs[2].token == "" {
			t.Fatalf("no resume token on %s", evs[2].raw)
		}
		resumed := b.open(t, s, openOpts{session: session, from: evs[2].token, ahead: 64})
		got := events(t, resumed, 6)
		expectSeqs(t, got, session, 3, 9)
		for _, m := range got {
			expectBytes(t, b.dialect, sent[m.seq], m)
		}
		publish(t, s, b.dialect, session, 9, 10, 0)
		live := events(t, resumed, 1)
		expectSeqs(t, live, session, 9, 10)
		// The first stream saw the same events once each.
		expectSeqs(t, events(t, first, 4), session, 6, 10)
		// A token of a resumed stream resumes too; from the newest event,
		// nothing is replayed and the next live event comes first.
		again := b.open(t, s, openOpts{session: session, from: live[0].token, ahead: 64})
		publish(t, s, b.dialect, session, 10, 11, 0)
		expectSeqs(t, events(t, again, 1), session, 10, 11)
	})
}

// A stream resumed from a position whose successors retention deleted is
// told so (D: event.replayed with the gap; R: replay-exhausted naming the
// earliest position held, or none when nothing of the session is held)
// and delivers what is still held after the position, once each, then
// live events.
func TestGapMarking(t *testing.T) {
	for _, deleteTo := range []int64{3, 6} {
		t.Run(fmt.Sprintf("deleted below %d of 6", deleteTo), func(t *testing.T) {
			forEach(t, func(t *testing.T, b binding) { testGap(t, b, deleteTo) })
		})
	}
}

func testGap(t *testing.T, b binding, deleteTo int64) {
	s := newStack(t, b.mode, stackConfig{})
	const session = "sess_gap"
	live := b.open(t, s, openOpts{session: session, lossless: true, ahead: 64}) // R: starts the tenant's indexer
	publish(t, s, b.dialect, session, 0, 6, 0)
	evs := events(t, live, 6)
	expectSeqs(t, evs, session, 0, 6)
	// The session's six events are alone in their partition, at offsets
	// 0 to 5; retention deletes those below deleteTo.
	p := partitioning.Partition([]byte(session), partitions)
	if b.dialect == dialectR {
		s.waitIndexed(t, p, 6)
	}
	topic := partitioning.Naming{}.Events(gateway.DevTenant)
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: topic, Partition: p, At: deleteTo})
	resp, err := s.Admin.DeleteRecords(context.Background(), offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}

	resumed := b.open(t, s, openOpts{session: session, from: evs[0].token, ahead: 64})
	var got []msg
	var marks []string
	want := fmt.Sprintf("partition %d requested 1 restart_at %d retention", p, deleteTo)
	if b.dialect == dialectR {
		want = fmt.Sprintf("session %s earliest 0:%d", session, deleteTo)
		if deleteTo == 6 {
			want = "session " + session
		}
	}
	for len(got) < int(6-deleteTo) || len(marks) == 0 {
		switch m := next(t, resumed); m.kind {
		case kindEvent:
			got = append(got, m)
		case kindReplayed, kindExhausted:
			if len(m.gaps) == 0 {
				t.Fatalf("%v without a gap: %s", m.kind, m.raw)
			}
			marks = append(marks, m.gaps...)
		case kindHeartbeat:
		default:
			t.Fatalf("unexpected %v: %s", m.kind, m.raw)
		}
	}
	expectSeqs(t, got, session, int(deleteTo), 6)
	if len(marks) != 1 || marks[0] != want {
		t.Fatalf("gap markers %q, want [%s]", marks, want)
	}
	publish(t, s, b.dialect, session, 6, 7, 0)
	expectSeqs(t, events(t, resumed, 1), session, 6, 7)
}

// A resume token is the dialect's, not the binding's: a position taken
// from one binding resumes on the other binding of the same dialect (D: a
// cursor from SSE's id or the WebSocket's delivery.cursor; R: an SSE id or
// the WebSocket event's session, epoch and seq).
func TestResumeAcrossBindings(t *testing.T) {
	forEach(t, func(t *testing.T, b binding) {
		var other binding
		for _, o := range bindings {
			if o.dialect == b.dialect && o.name != b.name {
				other = o
			}
		}
		s := newStack(t, b.mode, stackConfig{})
		const session = "sess_across"
		first := b.open(t, s, openOpts{session: session, lossless: true, ahead: 64})
		publish(t, s, b.dialect, session, 0, 5, 0)
		evs := events(t, first, 5)
		expectSeqs(t, evs, session, 0, 5)
		resumed := other.open(t, s, openOpts{session: session, from: evs[1].token, ahead: 64})
		expectSeqs(t, events(t, resumed, 3), session, 2, 5)
		publish(t, s, b.dialect, session, 5, 6, 0)
		expectSeqs(t, events(t, resumed, 1), session, 5, 6)
	})
}

// A resume token the gateway cannot use is refused with the dialect's
// error (D: subscription_rejected, over HTTP or in-band; R: invalid-filter,
// AEP-0003 §3.2.3), never served as a live stream.
func TestBadResumeTokenRefused(t *testing.T) {
	forEach(t, func(t *testing.T, b binding) {
		s := newStack(t, b.mode, stackConfig{})
		bad := map[dialect][]string{
			dialectD: {"garbage!", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}, // not base64; not signed by the server
			dialectR: {"sess_bad:0:-1"},                                        // a negative seq
		}[b.dialect]
		for _, token := range bad {
			if got := b.refuse(t, s, openOpts{session: "sess_bad", from: token}); got != b.refused {
				t.Fatalf("token %q: refused as %q, want %q", token, got, b.refused)
			}
		}
	})
}

// A resume on a workers-mode node whose filter workers have not answered
// its registration yet (none runs here; in a deployment, a worker that has
// not found a new tenant topic yet) delivers exactly the events after the
// position, then live ones, as dialect R's live.js resume check asks
// (Last-Event-ID / from = session:epoch:seq, a fresh session). The R
// bindings hold a replay until the engine's catch-up ends; before the fix
// it ended only once the workers' markers came, and nothing was delivered.
func TestResumeBeforeWorkersAnswer(t *testing.T) {
	for _, b := range bindings {
		if b.dialect != dialectR {
			continue
		}
		b.mode = engine.LiveWorkers
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s := newStack(t, b.mode, stackConfig{NoWorker: true})
			const session = "sess_early"
			publish(t, s, b.dialect, session, 0, 3, 0)
			resumed := b.open(t, s, openOpts{session: session, from: session + ":0:0", ahead: 64})
			expectSeqs(t, eventsWithin(t, resumed, 2, gatewaytest.Wait), session, 1, 3)
			publish(t, s, b.dialect, session, 3, 4, 0)
			expectSeqs(t, eventsWithin(t, resumed, 1, gatewaytest.Wait), session, 3, 4)
		})
	}
}

// eventsWithin is events with a bound on the whole read: heartbeats do
// not extend it.
func eventsWithin(t *testing.T, st stream, n int, d time.Duration) []msg {
	t.Helper()
	deadline := time.Now().Add(d)
	out := make([]msg, 0, n)
	for len(out) < n {
		m, ok := st.tryNext(t, time.Until(deadline))
		switch {
		case !ok:
			t.Fatalf("%d of %d events within %v", len(out), n, d)
		case m.kind == kindEvent:
			out = append(out, m)
		case m.kind != kindHeartbeat:
			t.Fatalf("after %d events: unexpected %v: %s", len(out), m.kind, m.raw)
		}
	}
	return out
}
