package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// rRestartArgs picks where the restarted gateways keep their data: an
// external broker (KAFKA_BROKERS, or the shared testcontainers broker) with
// a topic template unique to t, or else the embedded broker persisting to a
// data directory both processes share. shared reports the first kind: the
// broker outlives the gateways, and so does its consumer-group state.
func rRestartArgs(t *testing.T) (args []string, shared bool) {
	t.Helper()
	b := StartBroker(t)
	if b.Kind == KindExternal || b.Kind == KindTestcontainers {
		prefix := strings.ReplaceAll(TopicName(t), "_", "-")
		return []string{"--kafka-brokers", strings.Join(b.Seeds, ","),
			"--topic-template", prefix + ".{tenant}.events", "--topic-partitions", "3", "--topic-replication-factor", "1"}, true
	}
	return []string{"--data-dir", t.TempDir(), "--embedded-kafka-listen", "127.0.0.1:0", "--topic-partitions", "3"}, false
}

// rStreamMsg is one SSE message (comment or event) of a dialect R stream.
type rStreamMsg struct {
	comment, event, data, id string
}

// rStream reads one GET /stream response; its reader goroutine ends when
// the body is closed (close, or the test's cleanup).
type rStream struct {
	t *testing.T
	s *gatewaytest.SSEStream
}

// openRStream opens GET /stream with query and Last-Event-ID (when not
// empty) and returns once the relay has subscribed it (the stream-open
// comment), so that events posted afterwards are live for it. A
// replay-exhausted marker fails the test: see openRStreamMarkers.
func openRStream(t *testing.T, g *gatewayProc, query url.Values, lastEventID string) *rStream {
	t.Helper()
	s, markers := openRStreamMarkers(t, g, query, lastEventID)
	if len(markers) > 0 {
		t.Fatalf("unexpected %q: the gateway must still hold the session", markers)
	}
	return s
}

// openRStreamMarkers is openRStream that returns the replay-exhausted
// markers sent before the stream-open comment instead of failing on them.
func openRStreamMarkers(t *testing.T, g *gatewayProc, query url.Values, lastEventID string) (*rStream, []string) {
	t.Helper()
	hdr := http.Header{}
	if lastEventID != "" {
		hdr.Set("Last-Event-ID", lastEventID)
	}
	s := &rStream{t: t, s: gatewaytest.MustOpenSSE(t, g.URL+"/stream?"+query.Encode(), gatewaytest.SSEOptions{Header: hdr, Buffer: 256})}
	var markers []string
	for {
		m := s.next()
		switch {
		case strings.HasPrefix(m.comment, "replay-exhausted"):
			markers = append(markers, m.comment)
		case m.comment == "stream open":
			return s, markers
		default:
			t.Fatalf("message %+v before the stream-open comment", m)
		}
	}
}

func (s *rStream) close() { s.s.Close() }

// next returns the next message or comment; failing after a minute.
func (s *rStream) next() rStreamMsg {
	s.t.Helper()
	m, err := s.s.TryNext(time.Minute)
	if err != nil {
		s.t.Fatal(err)
	}
	return rStreamMsg{comment: m.Comment(), event: m.Event, data: m.Data, id: m.ID}
}

// nextEvent returns the next event, skipping pings; any other comment
// (closing, replay-exhausted) fails the test.
func (s *rStream) nextEvent() rStreamMsg {
	s.t.Helper()
	for {
		m := s.next()
		if m.comment == "ping" {
			continue
		}
		if m.comment != "" || m.data == "" {
			s.t.Fatalf("got %+v, want an event", m)
		}
		return m
	}
}

// postR posts dialect R events as NDJSON and requires a 202.
func postR(ctx context.Context, t *testing.T, g *gatewayProc, events ...string) {
	t.Helper()
	res, err := g.post(ctx, "/events", "application/x-ndjson", map[string]string{"AEP-Version": "0.1"}, strings.Join(events, "\n")+"\n")
	if err != nil || res.status != http.StatusAccepted {
		t.Fatalf("ingest: %v %d %s", err, res.status, res.body)
	}
}

// Resume survives the gateway process: a consumer reads part of a session
// from one gateway, the gateway stops (SIGTERM, or SIGKILL with no chance to
// flush the index), a new process starts on the same data, and reconnecting
// with Last-Event-ID gets exactly the strict tail, then live events; a
// `from` naming two sessions through the new process gets both tails.
func TestStreamRResumeAfterGatewayRestart(t *testing.T) {
	for _, variant := range []string{"sigterm", "sigkill"} {
		t.Run(variant, func(t *testing.T) {
			testStreamRResumeAfterRestart(t, variant == "sigkill")
		})
	}
}

func testStreamRResumeAfterRestart(t *testing.T, hard bool) {
	args, _ := rRestartArgs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	g1 := startGateway(t, args...)
	filter := url.Values{"filter": {`{"session":"s_r"}`}}
	live := openRStream(t, g1, filter, "")
	const n = 10
	sent := map[string]string{} // id -> bytes
	var batch []string
	for seq := 0; seq < n; seq++ {
		for _, s := range []string{"s_r", "s_a", "s_b", "s_other"} {
			ev := rEvent(s, seq)
			sent[fmt.Sprintf("%s:0:%d", s, seq)] = ev
			batch = append(batch, ev)
		}
	}
	postR(ctx, t, g1, batch...)
	// Read some: seq 0..3.
	const read = 4
	for seq := 0; seq < read; seq++ {
		m := live.nextEvent()
		if want := fmt.Sprintf("s_r:0:%d", seq); m.id != want || m.data != sent[want] {
			t.Fatalf("first gateway, message %d: id %q data %s; want %s", seq, m.id, m.data, want)
		}
	}
	last := fmt.Sprintf("s_r:0:%d", read-1)
	live.close()
	if hard {
		g1.kill()
	} else {
		g1.stop()
	}

	g2 := startGateway(t, args...)
	resumed := openRStream(t, g2, filter, last)
	for seq := read; seq < n; seq++ {
		m := resumed.nextEvent()
		if want := fmt.Sprintf("s_r:0:%d", seq); m.id != want || m.data != sent[want] || m.event != "tool.requested" {
			t.Fatalf("after restart, resumed after %s: got id %q data %s, want %s (strict tail)", last, m.id, m.data, want)
		}
	}
	postR(ctx, t, g2, rEvent("s_other", n), rEvent("s_r", n))
	if m := resumed.nextEvent(); m.id != fmt.Sprintf("s_r:0:%d", n) || m.data != rEvent("s_r", n) {
		t.Fatalf("after the tail: %+v, want the live s_r:0:%d", m, n)
	}

	// from with two sessions at once, no filter: each session's strict tail
	// (interleaving across sessions is free, order within one is not), and
	// nothing of the sessions not named, then live events.
	from := url.Values{"from": {`[{"session":"s_a","epoch":0,"seq":6},{"session":"s_b","seq":2}]`}}
	both := openRStream(t, g2, from, "")
	wantNext := map[string]int{"s_a": 7, "s_b": 3}
	for remaining := (n - 7) + (n - 3); remaining > 0; remaining-- {
		m := both.nextEvent()
		sess, _, _ := strings.Cut(m.id, ":")
		seq, ok := wantNext[sess]
		if !ok || m.id != fmt.Sprintf("%s:0:%d", sess, seq) || m.data != sent[m.id] {
			t.Fatalf("from two sessions: got id %q, want the next of %v", m.id, wantNext)
		}
		wantNext[sess] = seq + 1
	}
	postR(ctx, t, g2, rEvent("s_b", n))
	if m := both.nextEvent(); m.id != fmt.Sprintf("s_b:0:%d", n) {
		t.Fatalf("after both tails: %+v, want the live s_b:0:%d", m, n)
	}
	resumed.close()
	both.close()
	g2.stop()
}
