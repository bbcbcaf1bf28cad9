package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// at_least_once on an ad-hoc GET /aep/events stream, through two gateway
// processes: node A serves two streams and is killed (SIGKILL) after the
// client acknowledged half of the first one's events on node B; resumed on
// B with its subscription_id, the first stream gets exactly its
// unacknowledged events again, and once they are acknowledged nothing is
// pending; the second stream, abandoned with the dead node, is gone
// (410 subscription_error) a grace later, with no node left to end it.
func TestAdHocAtLeastOnceThroughTwoBinaries(t *testing.T) {
	b := StartBroker(t)
	prefix := strings.ReplaceAll(TopicName(t), "_", "-")
	args := []string{"--kafka-brokers", strings.Join(b.Seeds, ","), "--at-least-once-grace", "2s",
		"--topic-template", prefix + ".{tenant}.events", "--topic-partitions", "3", "--topic-replication-factor", "1"}
	nodeA, nodeB := startGateway(t, args...), startGateway(t, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	open := func(g *gatewayProc, query string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/aep/events?"+query, nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Fatalf("open %s: %d %s", query, resp.StatusCode, body)
		}
		return resp, resp.Header.Get("AEP-Subscription-Id")
	}
	acks := func(g *gatewayProc, id string, evts ...string) {
		t.Helper()
		var items []string
		for _, e := range evts {
			items = append(items, fmt.Sprintf(`{"type":"event.acknowledged","payload":{"acknowledged_event_id":%q}}`, e))
		}
		res, err := g.post(ctx, "/aep/subscriptions/"+id+"/acks", "application/json", nil, "["+strings.Join(items, ",")+"]")
		if err != nil || res.status != http.StatusOK {
			t.Fatalf("acks: %v %d %s", err, res.status, res.body)
		}
	}
	get := func(g *gatewayProc, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	const query = "types=task.*&delivery_mode=at_least_once&ack_timeout_ms=3600000"
	respA, id := open(nodeA, query)
	_, abandoned := open(nodeA, query+"&session_id=sess_none")
	if !strings.HasPrefix(id, "sub_") || !strings.HasPrefix(abandoned, "sub_") || id == abandoned {
		t.Fatalf("announced ids %q, %q", id, abandoned)
	}
	var events strings.Builder
	for i := range 6 {
		events.WriteString(dEvent(i, "sess_a") + "\n")
	}
	if res, err := nodeB.post(ctx, "/aep/events", "application/x-ndjson", nil, events.String()); err != nil || res.status != 202 {
		t.Fatalf("ingest: %v %d %s", err, res.status, res.body)
	}
	var first []string
	for _, m := range readSSE(ctx, t, respA, 6) {
		var d struct {
			ID string `json:"id"`
		}
		if m.event != "task.progress" || json.Unmarshal([]byte(m.data), &d) != nil {
			t.Fatalf("first delivery %+v", m)
		}
		first = append(first, d.ID)
	}
	acks(nodeB, id, first[:3]...)
	nodeA.kill()

	respB, resumed := open(nodeB, query+"&subscription_id="+id)
	defer respB.Body.Close()
	if resumed != id {
		t.Fatalf("the resume announces %q, want %s", resumed, id)
	}
	want := map[string]bool{first[3]: true, first[4]: true, first[5]: true}
	s := gatewaytest.NewSSEStream(t, respB, 0)
	for len(want) > 0 {
		m, err := s.TryNext(time.Until(time.Now().Add(60 * time.Second)))
		if err != nil {
			t.Fatalf("unacknowledged %v not delivered again: %v", want, err)
		}
		if !m.HasData || m.Event != "task.progress" {
			continue // comments (waiting for A's lease), event.redelivered notices
		}
		var d struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal([]byte(m.Data), &d)
		if !want[d.ID] {
			t.Fatalf("after the resume %s came (acknowledged: %v)", d.ID, first[:3])
		}
		delete(want, d.ID)
	}
	acks(nodeB, id, first[3:]...)
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := get(nodeB, "/aep/subscriptions/"+id)
		var st struct {
			PendingAcks int `json:"pending_acks"`
		}
		if code == http.StatusOK && json.Unmarshal([]byte(body), &st) == nil && st.PendingAcks == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pending after every ack: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// the abandoned one: polled where a look does not resume (and renew) it
	for {
		code, body := get(nodeB, "/aep/subscriptions/"+abandoned)
		if code == http.StatusGone || code == http.StatusNotFound {
			break
		}
		if code != http.StatusOK || time.Now().After(deadline) {
			t.Fatalf("the abandoned stream's subscription: %d %s", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, body := get(nodeB, "/aep/events?"+query+"&subscription_id="+abandoned); code != http.StatusGone || !strings.Contains(body, `"code":"subscription_error"`) {
		t.Fatalf("resume of the abandoned stream: %d %s", code, body)
	}
}
