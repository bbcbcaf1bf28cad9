package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/internal/aepclient"
)

// subState is "aepctl subscriptions get -o json".
func subState(t *testing.T, id string) aepclient.Subscription {
	t.Helper()
	var s aepclient.Subscription
	if err := json.Unmarshal([]byte(runOK(t, "", "subscriptions", "get", id, "-o", "json")), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitLag polls "subscriptions get" until the lag is want (the gateway
// commits acknowledged offsets every second and when the stream ends).
func waitLag(t *testing.T, id string, want int64) aepclient.Subscription {
	t.Helper()
	var s aepclient.Subscription
	if !gatewaytest.Eventually(20*time.Second, 100*time.Millisecond, func() bool {
		s = subState(t, id)
		return s.Lag != nil && *s.Lag == want
	}) {
		t.Fatalf("lag of %s stayed %+v, want %d", id, s, want)
	}
	return s
}

func publishD(t *testing.T, prefix, typ string, n int) []string {
	t.Helper()
	var lines, ids []string
	for i := range n {
		id := fmt.Sprintf("evt_%s_%03d", prefix, i)
		ids = append(ids, id)
		lines = append(lines, dLine(id, typ, fmt.Sprintf("sess_%s_%d", prefix, i%3)))
	}
	runOK(t, strings.Join(lines, "\n")+"\n", "publish", "--dialect", "d")
	return ids
}

// aepctl consume --ack drains a durable subscription to zero lag, as
// "subscriptions get" shows; --reject-types dead-letters the events it
// names; the subscription is listed, and deleted.
func TestConsumeAckDrainsToZeroLag(t *testing.T) {
	newStreamGateway(t)
	id := strings.TrimSpace(runOK(t, "", "subscriptions", "create", "--types", "task.*", "--ack-timeout", "20s"))
	if !strings.HasPrefix(id, "sub_") {
		t.Fatalf("create printed %q", id)
	}
	publishD(t, "ok", "task.progress", 40)
	rejected := publishD(t, "bad", "task.failed", 5)
	publishD(t, "memo", "memo.note", 3) // outside the filter
	if s := waitLag(t, id, 48); s.Streaming {
		t.Fatalf("before consume: %+v", s)
	}

	var out, errb syncBuffer
	code := run(t.Context(), []string{"consume", "--subscription", id, "--ack", "--ack-batch", "7", "--reject-types", "task.failed",
		"--count", "45", "--timeout", "30s", "-o", "ndjson"}, nil, &out, &errb)
	if code != exitOK {
		t.Fatalf("consume: exit %d\n%s", code, errb.String())
	}
	// 45 events, and the gateway's notices printed among them: a rejection
	// answered before the last events were read comes back as its
	// event.dead_lettered notice first (a race the gateway may win).
	events, deadLettered := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var v struct{ Type string }
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("consume printed %q: %v", line, err)
		}
		switch v.Type {
		case "event.dead_lettered":
			deadLettered++
		case "event.redelivered":
			t.Errorf("a redelivery within the ack timeout: %s", line)
		default:
			events++
		}
	}
	if events != 45 || deadLettered > 5 {
		t.Errorf("consume printed %d events and %d dead-letter notices, want 45 and at most 5", events, deadLettered)
	}
	if !strings.Contains(errb.String(), "acks: applied 40, rejected 5, unknown 0, closed 0, invalid 0") {
		t.Errorf("consume summary:\n%s", errb.String())
	}
	s := waitLag(t, id, 0)
	if len(s.Committed) == 0 {
		t.Errorf("get shows no committed offsets: %+v", s)
	}
	text := runOK(t, "", "subscriptions", "get", id)
	if !strings.Contains(text, "lag           0") {
		t.Errorf("subscriptions get:\n%s", text)
	}

	// The rejected events are not redelivered: a new stream has nothing.
	var out2, err2 syncBuffer
	code = run(t.Context(), []string{"consume", "--subscription", id, "--ack", "--count", "1", "--timeout", "2s", "-o", "ndjson"}, nil, &out2, &err2)
	if code != exitFailed || out2.String() != "" {
		t.Errorf("second consume: exit %d, printed:\n%s", code, out2.String())
	}
	for _, r := range rejected {
		if strings.Contains(out2.String(), r) {
			t.Errorf("rejected %s came again", r)
		}
	}

	if list := runOK(t, "", "subscriptions", "list"); !strings.Contains(list, id) {
		t.Errorf("list lacks %s:\n%s", id, list)
	}
	runOK(t, "", "subscriptions", "delete", id)
	var o, e strings.Builder
	if code := run(t.Context(), []string{"subscriptions", "get", id}, nil, &o, &e); code != exitFailed || !strings.Contains(e.String(), "404") {
		t.Errorf("get after delete: exit %d: %s", code, e.String())
	}
}

// aepctl ack and reject settle events of a stream another consume holds
// open; without an open stream the gateway records them for the next one.
func TestAckAndRejectCommands(t *testing.T) {
	newStreamGateway(t)
	id := strings.TrimSpace(runOK(t, "", "subscriptions", "create", "--types", "task.*"))
	ids := publishD(t, "ack", "task.progress", 4)

	var o, e strings.Builder
	if code := run(t.Context(), []string{"ack", "--subscription", "sub_01J0000000000000000000000X", ids[0]}, nil, &o, &e); code != exitFailed || !strings.Contains(e.String(), "404") {
		t.Errorf("ack of an unknown subscription: exit %d: %s", code, e.String())
	}
	if got := runOK(t, "", "ack", "--subscription", id, "evt_not_streamed_yet"); !strings.Contains(got, "recorded") {
		t.Errorf("ack without a stream printed:\n%s", got)
	}

	c := startRun(t, "consume", "--subscription", id, "-o", "ndjson") // no --ack; stopped below
	gatewaytest.Eventually(20*time.Second, 20*time.Millisecond, func() bool { return strings.Count(c.out.String(), "\n") >= 4 })
	got := runOK(t, "", "ack", "--subscription", id, ids[0], ids[1], ids[2])
	if strings.Count(got, "applied") != 3 {
		t.Errorf("ack printed:\n%s", got)
	}
	got = runOK(t, "", "reject", "--subscription", id, "-o", "json", ids[3])
	if !strings.Contains(got, `"result":"rejected"`) {
		t.Errorf("reject printed:\n%s", got)
	}
	got = runOK(t, "", "ack", "--subscription", id, "evt_never_delivered")
	if !strings.Contains(got, "unknown") {
		t.Errorf("ack of an unknown id printed:\n%s", got)
	}
	// The rejection is settled once its dead letter is written; the open
	// stream shows it.
	var s aepclient.Subscription
	if !gatewaytest.Eventually(20*time.Second, 50*time.Millisecond, func() bool {
		s = subState(t, id)
		return s.Streaming && s.PendingAcks == 0 && s.DeadLettered == 1 && s.Acked == 3
	}) {
		t.Fatalf("stream state after ack and reject: %+v", s)
	}
	// The rejected event is the tenant's newest dead letter.
	got = runOK(t, "", "dead-letters", "--limit", "1")
	if lines := strings.Split(strings.TrimSpace(got), "\n"); len(lines) != 2 || !strings.Contains(lines[1], id) ||
		!strings.Contains(lines[1], ids[3]) || !strings.Contains(lines[1], "task.progress") {
		t.Errorf("dead-letters printed:\n%s", got)
	}
	if got = runOK(t, "", "dead-letters", "-o", "json"); !strings.Contains(got, `"original_event_id":"`+ids[3]+`"`) {
		t.Errorf("dead-letters -o json printed:\n%s", got)
	}
	c.cancel() // Ctrl-C
	if code := c.wait(); code != exitOK {
		t.Fatalf("consume: exit %d\n%s", code, c.err.String())
	}
	waitLag(t, id, 0)
}
