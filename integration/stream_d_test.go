package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// sseMessage is one parsed server-sent event.
type sseMessage struct {
	id, event, data string
}

// readSSE reads messages from an event stream until n carrying data are
// read (comments are skipped), failing t if the stream ends first or ctx
// ends (gatewaytest.Wait without a deadline).
func readSSE(ctx context.Context, t *testing.T, resp *http.Response, n int) []sseMessage {
	t.Helper()
	s := gatewaytest.NewSSEStream(t, resp, 0)
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(gatewaytest.Wait)
	}
	var msgs []sseMessage
	for len(msgs) < n {
		m, err := s.TryNext(time.Until(deadline))
		if err != nil {
			t.Fatalf("stream did not deliver %d messages in time (%d read): %v", n, len(msgs), err)
		}
		if m.HasData {
			msgs = append(msgs, sseMessage{id: m.ID, event: m.Event, data: m.Data})
		}
	}
	return msgs
}

// The binary serves dialect D's SSE stream next to ingest: live events
// filtered by type and session, each stamped with delivery {mode, sequence,
// cursor} and carrying its cursor as the SSE id; a replayable stream from a
// mid-stream cursor gets exactly the tail. SIGTERM with streams open still
// exits cleanly.
func TestStreamDThroughTheBinary(t *testing.T) {
	b := StartBroker(t)
	prefix := strings.ReplaceAll(TopicName(t), "_", "-")
	g := startGateway(t, "--kafka-brokers", strings.Join(b.Seeds, ","),
		"--topic-template", prefix+".{tenant}.events", "--topic-partitions", "3", "--topic-replication-factor", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/aep/events?types=task.*&session_id=sess_live", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %v", resp.StatusCode, resp.Header)
	}
	var body strings.Builder
	for i := 0; i < 6; i++ {
		sess := "sess_live"
		if i%2 == 1 {
			sess = "sess_other"
		}
		body.WriteString(dEvent(i, sess) + "\n")
	}
	if res, err := g.post(ctx, "/aep/events", "application/x-ndjson", nil, body.String()); err != nil || res.status != 202 {
		t.Fatalf("ingest: %v %d %s", err, res.status, res.body)
	}
	msgs := readSSE(ctx, t, resp, 3)
	for i, m := range msgs {
		var ev struct {
			ID       string `json:"id"`
			Session  string `json:"session_id"`
			Delivery struct {
				Mode     string `json:"mode"`
				Sequence int    `json:"sequence"`
				Cursor   string `json:"cursor"`
			} `json:"delivery"`
		}
		if err := json.Unmarshal([]byte(m.data), &ev); err != nil {
			t.Fatalf("message %d data is not JSON: %v: %s", i, err, m.data)
		}
		if ev.Session != "sess_live" || m.event != "task.progress" {
			t.Errorf("message %d: session %s event %s: the filter let it through", i, ev.Session, m.event)
		}
		if want := fmt.Sprintf("evt_sess_live_%04d", 2*i); ev.ID != want {
			t.Errorf("message %d is %s, want %s (order within the session)", i, ev.ID, want)
		}
		if ev.Delivery.Mode != "best_effort" || ev.Delivery.Sequence != i+1 || ev.Delivery.Cursor == "" || m.id != ev.Delivery.Cursor {
			t.Errorf("message %d delivery %+v, SSE id %q", i, ev.Delivery, m.id)
		}
	}

	// Replay from the first message's cursor: exactly the two later events.
	rreq, _ := http.NewRequestWithContext(ctx, http.MethodGet,
		g.URL+"/aep/events?types=task.*&session_id=sess_live&delivery_mode=replayable&from_cursor="+msgs[0].id, nil)
	rresp, err := http.DefaultClient.Do(rreq)
	if err != nil || rresp.StatusCode != 200 {
		t.Fatalf("replay: %v %v", err, rresp)
	}
	replayed := readSSE(ctx, t, rresp, 3)
	if !strings.Contains(replayed[0].data, `"id":"evt_sess_live_0002"`) || !strings.Contains(replayed[1].data, `"id":"evt_sess_live_0004"`) {
		t.Fatalf("replay tail: %+v", replayed)
	}
	if replayed[2].event != "event.replayed" || !strings.Contains(replayed[2].data, `"events_replayed":2`) {
		t.Fatalf("after the tail: %+v", replayed[2])
	}

	// Both streams are still open: a clean exit (stop requires status 0)
	// means shutdown ended them instead of waiting out its timeout.
	g.stop()
}
