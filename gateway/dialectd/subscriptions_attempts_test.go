package dialectd_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/dialectd"
	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// subState is the part of GET /aep/subscriptions/{id} these tests read.
type subState struct {
	MaxAckPending int  `json:"max_ack_pending"`
	Streaming     bool `json:"streaming"`
	PendingAcks   int  `json:"pending_acks"`
	Handed        int  `json:"handed"`
}

func (e *sseEnv) state(id string) subState {
	e.t.Helper()
	code, b := e.do(http.MethodGet, "/aep/subscriptions/"+id, "")
	var st subState
	if code != http.StatusOK || json.Unmarshal(b, &st) != nil {
		e.t.Fatalf("get %s: %d %s", id, code, b)
	}
	return st
}

func (e *sseEnv) create(body string) string {
	e.t.Helper()
	code, b := e.do(http.MethodPost, "/aep/subscriptions", body)
	var created struct {
		ID string `json:"subscription_id"`
	}
	if code != http.StatusCreated || json.Unmarshal(b, &created) != nil {
		e.t.Fatalf("create: %d %s", code, b)
	}
	return created.ID
}

// nextWithin is next with a deadline over the heartbeats it skips (next
// alone waits forever on a stream that only sends heartbeats).
func (s *sseStream) nextWithin(d time.Duration) gatewaytest.SSEMessage {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for {
		m, err := s.TryNext(time.Until(deadline))
		if err != nil {
			s.t.Fatalf("no message but heartbeats within %v: %v", d, err)
		}
		if m.Comment() != "heartbeat" {
			return m
		}
	}
}

// redelivery reads an event.redelivered notice and the event after it.
func (s *sseStream) redelivery(id string, attempt int) {
	s.t.Helper()
	m := s.nextWithin(20 * time.Second)
	var n struct {
		Payload struct {
			OriginalEventID string `json:"original_event_id"`
			Attempt         int    `json:"attempt"`
		} `json:"payload"`
	}
	if err := json.Unmarshal([]byte(m.Data), &n); err != nil || m.Event != "event.redelivered" || n.Payload.OriginalEventID != id || n.Payload.Attempt != attempt {
		s.t.Fatalf("want event.redelivered of %s, attempt %d: %+v", id, attempt, m)
	}
	if d := s.event(); d.ID != id {
		s.t.Fatalf("redelivered %+v after the notice for %s", d, id)
	}
}

// Over a real socket, the SSE writer confirms each event it wrote and
// flushed: the event never acknowledged is dead-lettered after exactly
// max_attempts hand-overs that count: the one before a reconnect counts
// because the client acknowledged a later event of that connection, the
// next two because their ack timeouts passed with the stream open.
func TestSubscriptionsDDeadLetterAfterHandOvers(t *testing.T) {
	e := newSubsEnv(t, dialectd.SubscriptionsConfig{CommitInterval: 20 * time.Millisecond,
		Policy: durable.AckPolicy{Backoff: time.Millisecond}})
	id := e.create(`{"types":["task.*"],"max_attempts":3,"ack_timeout_ms":300}`)
	e.ingest(dEvent("evt_1", "task.updated", "s1"), dEvent("evt_2", "task.updated", "s1")) // one partition, in order
	s1 := e.openPath("/aep/subscriptions/" + id + "/stream")
	if a, b := s1.event().ID, s1.event().ID; a != "evt_1" || b != "evt_2" {
		t.Fatalf("first deliveries %s, %s", a, b)
	}
	gatewaytest.Poll(t, "both writes confirmed", func() bool { return e.state(id).Handed == 2 })
	if code, b := e.do(http.MethodPost, "/aep/subscriptions/"+id+"/acks", ackBody("event.acknowledged", "evt_2")); code != http.StatusOK {
		t.Fatalf("ack: %d %s", code, b)
	}
	s1.Close()
	gatewaytest.Poll(t, "the first stream released", func() bool { return !e.state(id).Streaming })
	s2 := e.openPath("/aep/subscriptions/" + id + "/stream")
	s2.redelivery("evt_1", 2)
	s2.redelivery("evt_1", 3)
	m := s2.next()
	if m.Event != "event.dead_lettered" || !strings.Contains(m.Data, `"original_event_id":"evt_1"`) || !strings.Contains(m.Data, `"attempts":3`) {
		t.Fatalf("after the third hand-over: %+v (want the dead letter, attempts 3)", m)
	}
	if dl := e.deadLetters("/aep/dead-letters"); len(dl.DeadLetters) != 1 || dl.DeadLetters[0].Event.Payload.Attempts != 3 {
		t.Fatalf("dead-letter topic: %+v", dl)
	}
}

// A connection that drops with events written but unread is charged
// nothing: the next stream delivers them again (marked), and after two
// such drops the third stream still delivers the event, not its dead
// letter, with max_attempts 2.
func TestSubscriptionsDDroppedConnectionsAreNotCharged(t *testing.T) {
	e := newSubsEnv(t, dialectd.SubscriptionsConfig{CommitInterval: 20 * time.Millisecond})
	id := e.create(`{"types":["task.*"],"max_attempts":2,"ack_timeout_ms":3600000}`)
	e.ingest(dEvent("evt_1", "task.updated", "s1"))
	for round := range 3 {
		s := e.openPath("/aep/subscriptions/" + id + "/stream")
		if round > 0 {
			s.redelivery("evt_1", 2)
		} else if d := s.event(); d.ID != "evt_1" {
			t.Fatalf("first delivery %+v", d)
		}
		gatewaytest.Poll(t, "the write confirmed", func() bool { return e.state(id).Handed == 1 })
		s.Close() // read but never acknowledged: as if it sat unread in the socket
		gatewaytest.Poll(t, "the stream released", func() bool { return !e.state(id).Streaming })
	}
	if dl := e.deadLetters("/aep/dead-letters"); len(dl.DeadLetters) != 0 {
		t.Fatalf("dead letters after drops: %+v", dl)
	}
}

// max_ack_pending: set at creation (validated, shown), lowered per stream
// by the query parameter, enforced: a consumer that acks nothing is handed
// no more than the cap, and acks make room for exactly as many.
func TestSubscriptionsDMaxAckPending(t *testing.T) {
	e := newSubsEnv(t, dialectd.SubscriptionsConfig{CommitInterval: 20 * time.Millisecond})
	for _, body := range []string{`{"types":["task.*"],"max_ack_pending":0}`, `{"types":["task.*"],"max_ack_pending":10001}`} {
		code, b := e.do(http.MethodPost, "/aep/subscriptions", body)
		if code != http.StatusBadRequest || !strings.Contains(string(b), `"code":"subscription_rejected"`) || !strings.Contains(string(b), `"field":"max_ack_pending"`) {
			t.Errorf("%s: %d %s", body, code, b)
		}
	}
	if st := e.state(e.create(`{"types":["chat.*"]}`)); st.MaxAckPending != durable.DefaultMaxAckPending {
		t.Errorf("default max_ack_pending %d", st.MaxAckPending)
	}
	code, b := e.do(http.MethodPost, "/aep/subscriptions", `{"types":["task.*"],"max_ack_pending":4}`)
	if code != http.StatusCreated || !strings.Contains(string(b), `"max_ack_pending":4`) {
		t.Fatalf("create: %d %s", code, b)
	}
	var created struct {
		ID string `json:"subscription_id"`
	}
	_ = json.Unmarshal(b, &created)
	id := created.ID
	if st := e.state(id); st.MaxAckPending != 4 {
		t.Fatalf("get: %+v", st)
	}
	if _, b := e.do(http.MethodGet, "/aep/subscriptions", ""); !strings.Contains(string(b), `"max_ack_pending":4`) {
		t.Fatalf("list: %s", b)
	}
	for _, q := range []string{"abc", "0", "10001"} {
		code, b := e.do(http.MethodGet, "/aep/subscriptions/"+id+"/stream?max_ack_pending="+q, "")
		if code != http.StatusBadRequest || !strings.Contains(string(b), `"field":"max_ack_pending"`) {
			t.Errorf("stream with max_ack_pending=%s: %d %s", q, code, b)
		}
	}
	for i := range 10 { // one session: one partition, read in order
		e.ingest(dEvent(fmt.Sprintf("evt_%02d", i), "task.updated", "s"))
	}
	atCap := func(handed, pending int) {
		t.Helper()
		gatewaytest.Poll(t, fmt.Sprintf("%d hand-overs", handed), func() bool { return e.state(id).Handed >= handed })
		if st := e.state(id); st.Handed != handed || st.PendingAcks != pending {
			t.Fatalf("at the cap: %+v (want %d handed, %d pending)", st, handed, pending)
		}
	}
	// the stream lowers the cap to 2
	s := e.openPath("/aep/subscriptions/" + id + "/stream?max_ack_pending=2")
	ids := []string{s.event().ID, s.event().ID}
	atCap(2, 2)
	e.do(http.MethodPost, "/aep/subscriptions/"+id+"/acks", ackBody("event.acknowledged", ids...))
	s.event()
	s.event()
	atCap(4, 2)
	s.Close()
	gatewaytest.Poll(t, "the stream released", func() bool { return !e.state(id).Streaming })
	// a value above the subscription's keeps the subscription's (4): the
	// 2 pending come again (marked), then 2 new ones
	s = e.openPath("/aep/subscriptions/" + id + "/stream?max_ack_pending=50")
	s.redelivery("evt_02", 2)
	s.redelivery("evt_03", 2)
	if a, b := s.event().ID, s.event().ID; a != "evt_04" || b != "evt_05" {
		t.Fatalf("after the redeliveries: %s, %s", a, b)
	}
	atCap(4, 4)
}

// error-model.md: a rejection's error must carry code, message and
// retryable. One that leaves any out is refused ("invalid", nothing
// stored: the event stays pending, not dead-lettered); a retryable one
// ("retry") redelivers the event, and once max_attempts hand-overs are
// spent the event is dead-lettered with the consumer's error.
func TestSubscriptionsDRejectionsNeedRetryableAndRetryableRedelivers(t *testing.T) {
	e := newSubsEnv(t, dialectd.SubscriptionsConfig{CommitInterval: 20 * time.Millisecond,
		Policy: durable.AckPolicy{Backoff: time.Millisecond}})
	id := e.create(`{"types":["task.*"],"max_attempts":2,"ack_timeout_ms":3600000}`)
	e.ingest(dEvent("evt_1", "task.updated", "s1"))
	s := e.openPath("/aep/subscriptions/" + id + "/stream")
	if d := s.event(); d.ID != "evt_1" {
		t.Fatalf("first delivery %+v", d)
	}
	gatewaytest.Poll(t, "the write confirmed", func() bool { return e.state(id).Handed == 1 })
	reject := func(errJSON string) string {
		t.Helper()
		body := `[{"type":"event.rejected","payload":{"acknowledged_event_id":"evt_1"` + errJSON + `}}]`
		code, b := e.do(http.MethodPost, "/aep/subscriptions/"+id+"/acks", body)
		if code != http.StatusOK {
			t.Fatalf("acks %s: %d %s", body, code, b)
		}
		return string(b)
	}
	for name, errJSON := range map[string]string{
		"no error":             ``,
		"no retryable":         `,"error":{"code":"tool_error","message":"cannot"}`,
		"no message":           `,"error":{"code":"tool_error","retryable":false}`,
		"empty code":           `,"error":{"code":"","message":"m","retryable":false}`,
		"retryable not a bool": `,"error":{"code":"tool_error","message":"m","retryable":"yes"}`,
	} {
		b := reject(errJSON)
		if name == "retryable not a bool" {
			// not an object of the right shape: the element is invalid too
			if !strings.Contains(b, `"result":"invalid"`) {
				t.Fatalf("%s: %s", name, b)
			}
			continue
		}
		if !strings.Contains(b, `"result":"invalid"`) || !strings.Contains(b, "code, message and retryable") || !strings.Contains(b, `"acknowledged_event_id":"evt_1"`) {
			t.Fatalf("%s: %s (want invalid, naming the members)", name, b)
		}
	}
	if st := e.state(id); st.PendingAcks != 1 {
		t.Fatalf("after refused rejections: %+v (want the event still pending)", st)
	}
	if dl := e.deadLetters("/aep/dead-letters"); len(dl.DeadLetters) != 0 {
		t.Fatalf("refused rejections dead-lettered: %+v", dl)
	}
	retry := `,"error":{"code":"tool_timeout","message":"try later","retryable":true}`
	if b := reject(retry); !strings.Contains(b, `"result":"retry"`) {
		t.Fatalf("retryable rejection: %s", b)
	}
	s.redelivery("evt_1", 2)
	gatewaytest.Poll(t, "the second write confirmed", func() bool { return e.state(id).Handed == 2 })
	if b := reject(retry); !strings.Contains(b, `"result":"retry"`) {
		t.Fatalf("second retryable rejection: %s", b)
	}
	m := s.next()
	if m.Event != "event.dead_lettered" || !strings.Contains(m.Data, `"original_event_id":"evt_1"`) || !strings.Contains(m.Data, `"attempts":2`) || !strings.Contains(m.Data, `"tool_timeout"`) {
		t.Fatalf("after max_attempts retryable rejections: %+v (want the dead letter with tool_timeout, attempts 2)", m)
	}
}
