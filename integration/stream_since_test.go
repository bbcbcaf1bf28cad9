package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// since= on both streams, served by a node that did not ingest the events:
// two gateway processes on one Kafka; events of both dialects published on
// the first, and the second's GET /aep/events?since=10m and GET
// /stream?since=10m&live=0 replay them (the start comes from the broker's
// timestamp index, not from the node). Out of bounds is 400 there too.
func TestStreamsSinceOnAnotherNode(t *testing.T) {
	b := StartBroker(t)
	prefix := strings.ReplaceAll(TopicName(t), "_", "-")
	args := []string{"--kafka-brokers", strings.Join(b.Seeds, ","),
		"--topic-template", prefix + ".{tenant}.events", "--topic-partitions", "3", "--topic-replication-factor", "1"}
	a, other := startGateway(t, args...), startGateway(t, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var d strings.Builder
	for i := range 3 {
		d.WriteString(dEvent(i, "sess_since") + "\n")
	}
	if res, err := a.post(ctx, "/aep/events", "application/x-ndjson", nil, d.String()); err != nil || res.status != http.StatusAccepted {
		t.Fatalf("ingest D: %v %d %s", err, res.status, res.body)
	}
	r := rEventE("s_since", 0, 0) + "\n" + rEventE("s_since", 0, 1) + "\n"
	if res, err := a.post(ctx, "/events", "application/x-ndjson", map[string]string{"AEP-Version": "0.1"}, r); err != nil || res.status != http.StatusAccepted {
		t.Fatalf("ingest R: %v %d %s", err, res.status, res.body)
	}
	open := func(path string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, other.URL+path, nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}

	dresp := open("/aep/events?types=task.*&since=10m")
	if dresp.StatusCode != http.StatusOK {
		t.Fatalf("D since: %d", dresp.StatusCode)
	}
	msgs := readSSE(ctx, t, dresp, 4)
	for i := range 3 {
		if want := fmt.Sprintf(`"id":"evt_sess_since_%04d"`, i); !strings.Contains(msgs[i].data, want) || !strings.Contains(msgs[i].data, `"mode":"replayable"`) {
			t.Errorf("D message %d: %s; want %s, replayable", i, msgs[i].data, want)
		}
	}
	if msgs[3].event != "event.replayed" || !strings.Contains(msgs[3].data, `"events_replayed":3`) {
		t.Errorf("after the replay: %+v; want event.replayed of 3", msgs[3])
	}

	rresp := open("/stream?since=10m&live=0")
	if rresp.StatusCode != http.StatusOK {
		t.Fatalf("R since: %d", rresp.StatusCode)
	}
	rmsgs := readSSE(ctx, t, rresp, 2)
	if rmsgs[0].id != "s_since:0:0" || rmsgs[1].id != "s_since:0:1" {
		t.Errorf("R since replayed %q, %q; want s_since:0:0, s_since:0:1", rmsgs[0].id, rmsgs[1].id)
	}

	if resp := open("/aep/events?types=*&since=25h"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("D since=25h: %d, want 400", resp.StatusCode)
	}
	if resp := open("/stream?since=25h"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("R since=25h: %d, want 400", resp.StatusCode)
	}
}
