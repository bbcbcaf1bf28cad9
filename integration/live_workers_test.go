package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// workersEvent is a dialect D event of session sess: task.progress for
// even i, message.sent for odd i.
func workersEvent(i int, sess string) string {
	typ := "task.progress"
	if i%2 == 1 {
		typ = "message.sent"
	}
	return strings.Replace(dEvent(i, sess), `"type":"task.progress"`, fmt.Sprintf("%q:%q", "type", typ), 1)
}

// workersStream is one open SSE stream and what it has read.
type workersStream struct {
	sse  *gatewaytest.SSEStream // one reader for the stream's whole life
	ids  []string
	seq  int
	curs []string // the cursor of each event read
}

// read reads n messages carrying data (comments skipped) before ctx ends.
func (s *workersStream) read(ctx context.Context, t *testing.T, n int) []sseMessage {
	t.Helper()
	deadline, _ := ctx.Deadline()
	var msgs []sseMessage
	for len(msgs) < n {
		m, err := s.sse.TryNext(time.Until(deadline))
		if err != nil {
			t.Fatalf("stream did not deliver %d messages in time (%d read): %v", n, len(msgs), err)
		}
		if m.HasData {
			msgs = append(msgs, sseMessage{id: m.ID, event: m.Event, data: m.Data})
		}
	}
	return msgs
}

func (s *workersStream) cursorAt(i int) string { return s.curs[i] }

func openWorkersStream(ctx context.Context, t *testing.T, g *gatewayProc, query string) *workersStream {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/aep/events?"+query, nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("stream %s on %s: %v %v", query, g.URL, err, resp)
	}
	return &workersStream{sse: gatewaytest.NewSSEStream(t, resp, 0)}
}

// expect reads the events want (in this order) with sequences following
// the ones read before: no gap, no duplicate, nothing in between.
func (s *workersStream) expect(ctx context.Context, t *testing.T, name string, want []string) {
	t.Helper()
	for i, m := range s.read(ctx, t, len(want)) {
		var ev struct {
			ID       string `json:"id"`
			Delivery struct {
				Sequence int    `json:"sequence"`
				Cursor   string `json:"cursor"`
			} `json:"delivery"`
		}
		if err := json.Unmarshal([]byte(m.data), &ev); err != nil {
			t.Fatalf("%s: message %d: %v: %s", name, i, err, m.data)
		}
		s.seq++
		if ev.ID != want[i] || ev.Delivery.Sequence != s.seq {
			t.Fatalf("%s: got %s sequence %d, want %s sequence %d", name, ev.ID, ev.Delivery.Sequence, want[i], s.seq)
		}
		s.ids = append(s.ids, ev.ID)
		s.curs = append(s.curs, ev.Delivery.Cursor)
	}
}

// Two gateway processes in --live-delivery workers and a --role
// filter-worker process: events published on node A reach SSE subscribers
// on A and B with their filters, in order, without a gap or a duplicate;
// the worker is SIGKILLed and another started, and the live subscribers
// lose nothing; a subscriber resuming with a cursor on B gets exactly the
// rest.
func TestLiveWorkersAcrossNodes(t *testing.T) {
	b := StartBroker(t)
	prefix := strings.ReplaceAll(TopicName(t), "_", "-")
	args := []string{"--kafka-brokers", strings.Join(b.Seeds, ","),
		"--topic-template", prefix + ".{tenant}.events", "--topic-partitions", "3", "--topic-replication-factor", "1",
		"--live-delivery", "workers", "--live-registry-topic", prefix + ".registry",
		"--live-delivery-topic", prefix + ".delivery", "--live-delivery-partitions", "4",
		"--filter-worker-group", prefix + "-workers"}
	worker := startGateway(t, append([]string{"--role", "filter-worker"}, args...)...)
	nodeA := startGateway(t, append([]string{"--node-id", "node-a"}, args...)...)
	nodeB := startGateway(t, append([]string{"--node-id", "node-b"}, args...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	const sess = "sess_w"
	tasksA := openWorkersStream(ctx, t, nodeA, "types=task.*&session_id="+sess)
	allB := openWorkersStream(ctx, t, nodeB, "types=*&session_id="+sess)
	publish := func(from, to int) (all, tasks []string) {
		var body strings.Builder
		for i := from; i < to; i++ {
			body.WriteString(workersEvent(i, sess) + "\n")
			id := fmt.Sprintf("evt_%s_%04d", sess, i)
			all = append(all, id)
			if i%2 == 0 {
				tasks = append(tasks, id)
			}
		}
		if res, err := nodeA.post(ctx, "/aep/events", "application/x-ndjson", nil, body.String()); err != nil || res.status != http.StatusAccepted {
			t.Fatalf("ingest: %v %d %s", err, res.status, res.body)
		}
		return all, tasks
	}

	all1, tasks1 := publish(0, 20)
	tasksA.expect(ctx, t, "node A", tasks1)
	allB.expect(ctx, t, "node B", all1)
	// The first events may reach a subscriber through its own catch-up
	// (until the workers' group has formed and answered the registration
	// with its markers); once the group has formed, the worker forwards.
	waitMetric(ctx, t, worker, "aep_filterworker_markers_total")
	all1b, tasks1b := publish(20, 30)
	tasksA.expect(ctx, t, "node A", tasks1b)
	allB.expect(ctx, t, "node B", all1b)
	waitMetric(ctx, t, worker, "aep_filterworker_forwarded_total")

	// The worker dies without a word; its replacement starts from the
	// committed offsets and may forward again what the first had: the
	// nodes drop those copies.
	worker.kill()
	all2, tasks2 := publish(30, 50)
	worker = startGateway(t, append([]string{"--role", "filter-worker"}, args...)...)
	tasksA.expect(ctx, t, "node A after the worker's replacement", tasks2)
	allB.expect(ctx, t, "node B after the worker's replacement", all2)
	waitMetric(ctx, t, worker, "aep_filterworker_forwarded_total")
	all3, tasks3 := publish(50, 60)
	tasksA.expect(ctx, t, "node A", tasks3)
	allB.expect(ctx, t, "node B", all3)

	// Resume on B from the cursor of its 5th event: exactly the rest.
	rest := slices.Concat(all1, all1b, all2, all3)[5:]
	resumed := openWorkersStream(ctx, t, nodeB, "types=*&session_id="+sess+"&delivery_mode=replayable&from_cursor="+allB.cursorAt(4))
	resumed.seq = 5
	resumed.expect(ctx, t, "resumed on node B", rest)
	if msgs := resumed.read(ctx, t, 1); msgs[0].event != "event.replayed" {
		t.Fatalf("after the replay: %+v", msgs[0])
	}
	all4, _ := publish(60, 65)
	resumed.expect(ctx, t, "resumed on node B, live", all4)
	allB.expect(ctx, t, "node B", all4)
}

// liveModeArgs are the gateway flags of live-delivery mode ("tail", or
// "workers": every node also runs a filter worker, --role all), with the
// workers-mode topics and group named after prefix.
func liveModeArgs(mode, prefix string) []string {
	if mode != "workers" {
		return nil
	}
	return []string{"--live-delivery", "workers", "--role", "all",
		"--live-registry-topic", prefix + ".registry", "--live-delivery-topic", prefix + ".delivery",
		"--live-delivery-partitions", "4", "--filter-worker-group", prefix + "-workers"}
}

// scrape reads g's /metrics.
func scrape(ctx context.Context, t *testing.T, g *gatewayProc) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := io.Copy(&b, resp.Body); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// waitMetric waits until worker's counter name is above zero.
func waitMetric(ctx context.Context, t *testing.T, worker *gatewayProc, name string) {
	t.Helper()
	var m string
	if !gatewaytest.Eventually(30*time.Second, 100*time.Millisecond, func() bool {
		m = scrape(ctx, t, worker)
		return strings.Contains(m, "\n"+name+" ") && !strings.Contains(m, "\n"+name+" 0\n")
	}) {
		t.Fatalf("%s stays 0:\n%s", name, m)
	}
}
