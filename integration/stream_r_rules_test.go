package integration

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/twmb/franz-go/pkg/kadm"
)

func rEventE(session string, epoch, seq int) string {
	return fmt.Sprintf(`{"aep":"0.1","id":"01JX9YB0%s%02d%04d","type":"tool.requested","time":"2026-07-03T10:14:00.000Z","source":"aep://host-a/agent/claude-code/session/%s","agent":"claude-code","session":%q,"seq":%d,"epoch":%d,"data":{}}`,
		strings.ToUpper(session), epoch, seq, session, session, seq, epoch)
}

// rSessionEvents is a session of 2 epochs (the counter restarts at the
// bump), interleaved with another session, as posted.
func rSessionEvents() (all []string, positions []string, session []string) {
	for epoch := 0; epoch < 2; epoch++ {
		for seq := 0; seq < 8; seq++ {
			ev := rEventE("s_pos", epoch, seq)
			all = append(all, ev, rEventE("s_noise", epoch, seq))
			positions = append(positions, fmt.Sprintf("s_pos:%d:%d", epoch, seq))
			session = append(session, ev)
		}
	}
	return all, positions, session
}

func rArgs(t *testing.T) []string {
	b := StartBroker(t)
	prefix := strings.ReplaceAll(TopicName(t), "_", "-")
	return []string{"--kafka-brokers", strings.Join(b.Seeds, ","), "--topic-template", prefix + ".{tenant}.events",
		"--topic-partitions", "3", "--topic-replication-factor", "1"}
}

// Resume from every position of a session, through the binary on the
// harness broker: each reconnect gets exactly the strict tail, in order,
// with no duplicate and nothing of the other session.
func TestStreamRResumeFromEveryPosition(t *testing.T) {
	g := startGateway(t, rArgs(t)...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	all, positions, session := rSessionEvents()
	// Open a stream first so the tenant's session index runs.
	warm := openRStream(t, g, url.Values{"filter": {`{"session":"s_pos"}`}}, "")
	postR(ctx, t, g, all...)
	for i := range session {
		if m := warm.nextEvent(); m.data != session[i] {
			t.Fatalf("live %d: %s", i, m.data)
		}
	}
	warm.close()
	for i, pos := range positions[:len(positions)-1] {
		s := openRStream(t, g, url.Values{"filter": {`{"session":["s_pos","s_noise"]}`}}, pos)
		for j := i + 1; j < len(session); j++ {
			m := s.nextEvent()
			if m.data != session[j] || m.id != positions[j] {
				s.close()
				t.Fatalf("resume after %s: message %d is %s (%s), want %s", pos, j-i-1, m.id, m.data, positions[j])
			}
		}
		s.close()
	}
	g.stop()
}

// A log start moved past a requested position (retention, here forced with
// DeleteRecords on the broker) is told first: ": replay-exhausted" with the
// earliest held position, before anything replayed, then what is held.
func TestStreamRReplayExhaustedAfterLogStartMoves(t *testing.T) {
	b := StartBroker(t)
	prefix := strings.ReplaceAll(TopicName(t), "_", "-")
	g := startGateway(t, "--kafka-brokers", strings.Join(b.Seeds, ","), "--topic-template", prefix+".{tenant}.events",
		"--topic-partitions", "1", "--topic-replication-factor", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	warm := openRStream(t, g, url.Values{"filter": {`{"session":"s_ret"}`}}, "") // starts the tenant's indexer
	var evs []string
	for seq := 0; seq < 10; seq++ {
		evs = append(evs, rEventE("s_ret", 0, seq))
	}
	postR(ctx, t, g, evs...)
	for range evs {
		warm.nextEvent()
	}
	warm.close()

	// The indexer commits its group offsets only after the index topic
	// acknowledged the checkpoints: wait until it has indexed all 10.
	topic := prefix + ".default.events"
	adm := kadm.NewClient(b.Client(t))
	for {
		offs, err := adm.FetchOffsetsForTopics(ctx, topic+".indexer", topic)
		if err == nil {
			if o, ok := offs.Lookup(topic, 0); ok && o.At >= 10 {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("the indexer never committed past the events: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var off kadm.Offsets
	off.Add(kadm.Offset{Topic: topic, Partition: 0, At: 5})
	res, err := adm.DeleteRecords(ctx, off)
	if err != nil || res.Error() != nil {
		t.Fatalf("delete records: %v %v", err, res.Error())
	}
	s, markers := openRStreamMarkers(t, g, url.Values{}, "s_ret:0:1")
	// The marker goes out before the session's first replayed event,
	// right after the stream-open comment (docs/relay.md).
	if m := s.next(); len(markers) != 0 || m.comment != "replay-exhausted s_ret 0:5" {
		t.Fatalf("markers before the stream %q, then %+v; want one replay-exhausted naming 0:5 before the events", markers, m)
	}
	for seq := 5; seq < 10; seq++ {
		if m := s.nextEvent(); m.id != fmt.Sprintf("s_ret:0:%d", seq) {
			t.Fatalf("after the marker: %+v, want seq %d", m, seq)
		}
	}
	g.stop()
}

// WebSocket /socket: a refused subscribe is answered in-band and the
// connection and its other subscription keep serving.
func TestSocketRInBandErrorKeepsOtherSubscription(t *testing.T) {
	g := startGateway(t, rArgs(t)...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := gatewaytest.DialWSR(t, gatewaytest.WSURL(g.URL, "/socket"), `{"type":"hello","versions":["0.1"],"role":"consumer","identity":{"agent":"it"}}`, gatewaytest.WSOptions{})
	w.Subscribe("good", `"filter":{"session":"s_ws"}`)
	w.Send(`{"type":"subscribe","id":"bad","filter":{"type":["tool.*.progress"]}}`)
	if m := w.Next(); m.Str("type") != "error" || m.Str("id") != "bad" || m.Str("code") != "invalid-filter" {
		t.Fatalf("subscribe bad: %v", m)
	}
	postR(ctx, t, g, rEventE("s_ws", 0, 0), rEventE("s_other", 0, 0))
	m := w.Next()
	if m["session"] != "s_ws" || m["aep"] != "0.1" {
		t.Fatalf("the good subscription after the in-band error: %v", m)
	}
	g.stop()
}
