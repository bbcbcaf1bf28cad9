package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// Dialect R through the binary: discovery advertises the streaming
// endpoints; GET /stream delivers the stored bytes with id
// session:epoch:seq; reconnecting with Last-Event-ID gets exactly the
// strict tail, then live events.
func TestStreamRThroughTheBinary(t *testing.T) {
	b := StartBroker(t)
	prefix := strings.ReplaceAll(TopicName(t), "_", "-")
	g := startGateway(t, "--kafka-brokers", strings.Join(b.Seeds, ","),
		"--topic-template", prefix+".{tenant}.events", "--topic-partitions", "3", "--topic-replication-factor", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	resp, err := http.Get(g.URL + "/.well-known/aep")
	if err != nil {
		t.Fatal(err)
	}
	var disco struct {
		Endpoints    map[string]string `json:"endpoints"`
		Capabilities struct {
			Filters []string `json:"filters"`
		} `json:"capabilities"`
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(raw, &disco); err != nil || disco.Endpoints["stream"] != "/stream" ||
		disco.Endpoints["socket"] != "/socket" || len(disco.Capabilities.Filters) == 0 {
		t.Fatalf("discovery: %v %s", err, raw)
	}

	open := func(lastEventID string) *http.Response {
		u := g.URL + "/stream?filter=" + url.QueryEscape(`{"session":"s_r"}`)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		req.Header.Set("Accept", "text/event-stream")
		if lastEventID != "" {
			req.Header.Set("Last-Event-ID", lastEventID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream: %v %v", err, resp)
		}
		return resp
	}
	live := open("")
	sent := map[int]string{}
	var body strings.Builder
	for seq := 0; seq < 6; seq++ {
		sent[seq] = rEvent("s_r", seq)
		body.WriteString(sent[seq] + "\n")
		body.WriteString(rEvent("s_other", seq) + "\n")
	}
	if res, err := g.post(ctx, "/events", "application/x-ndjson", map[string]string{"AEP-Version": "0.1"}, body.String()); err != nil || res.status != 202 {
		t.Fatalf("ingest: %v %d %s", err, res.status, res.body)
	}
	msgs := readSSE(ctx, t, live, 6)
	for seq, m := range msgs {
		if m.data != sent[seq] {
			t.Fatalf("message %d not byte-identical:\n got %s\nwant %s", seq, m.data, sent[seq])
		}
		if want := fmt.Sprintf("s_r:0:%d", seq); m.id != want || m.event != "tool.requested" {
			t.Fatalf("message %d id %q event %q, want %s", seq, m.id, m.event, want)
		}
	}
	live.Body.Close()

	// Resume strictly after seq 2: seq 3, 4, 5, then a live event.
	resumed := open("s_r:0:2")
	if res, err := g.post(ctx, "/events", "application/json", map[string]string{"AEP-Version": "0.1"}, rEvent("s_r", 6)); err != nil || res.status != 202 {
		t.Fatalf("ingest live: %v %d %s", err, res.status, res.body)
	}
	tail := readSSE(ctx, t, resumed, 4)
	for i, m := range tail {
		if want := fmt.Sprintf("s_r:0:%d", 3+i); m.id != want {
			t.Fatalf("resumed message %d is %s, want %s (strict tail, then live)", i, m.id, want)
		}
	}
	resumed.Body.Close()
	g.stop()
}
