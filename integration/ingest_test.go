package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/partitioning"
)

func rEvent(session string, seq int) string {
	return fmt.Sprintf(`{"aep":"0.1","id":"01JX9YB0%s%06d","type":"tool.requested","time":"2026-07-03T10:14:00.000Z","source":"aep://host-a/agent/claude-code/session/%s","agent":"claude-code","session":%q,"seq":%d,"epoch":0,"subject":"Bash","data":{"n":%d}}`,
		strings.ToUpper(session), seq, session, session, seq, seq)
}

func dEvent(i int, session string) string {
	return fmt.Sprintf(`{"aep_version":"0.1","id":"evt_%s_%04d","type":"task.progress","source":"agent:researcher","target":"tool:crawler","task_id":"task_01","session_id":%q,"created_at":"2026-07-09T10:00:00Z","payload":{"i":%d}}`, session, i, session, i)
}

type position struct {
	Index     int    `json:"index"`
	EventIdx  int    `json:"event_index"`
	ID        string `json:"id"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

type ingestReply struct {
	Accepted  int        `json:"accepted"`
	Topic     string     `json:"topic"`
	Positions []position `json:"positions"`
}

func readTopic(t *testing.T, b *Broker, seeds []string, topic string, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records from %s before the deadline", len(out), want, topic)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

func hdr(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

// Events posted in both dialects through the gateway process are read back
// with a plain franz-go consumer: same bytes, key = session, routing headers,
// partition = murmur2(key) % partitions, at the positions the 202 reported.
func TestIngestBothDialectsReadBackWithPlainConsumer(t *testing.T) {
	b := StartBroker(t)
	prefix := strings.ReplaceAll(TopicName(t), "_", "-")
	g := startGateway(t, "--kafka-brokers", strings.Join(b.Seeds, ","),
		"--topic-template", prefix+".{tenant}.events", "--topic-partitions", "3", "--topic-replication-factor", "1")
	ctx := context.Background()

	sent := map[string]string{} // id -> bytes
	var ndjson strings.Builder
	for s := 0; s < 4; s++ {
		for q := 0; q < 5; q++ {
			ev := rEvent(fmt.Sprintf("s%d", s), q)
			ndjson.WriteString(ev + "\n")
		}
	}
	res, err := g.post(ctx, "/events", "application/x-ndjson", map[string]string{"AEP-Version": "0.1"}, ndjson.String())
	if err != nil || res.status != 202 {
		t.Fatalf("R ingest: %v %d %s", err, res.status, res.body)
	}
	var rr ingestReply
	if err := json.Unmarshal(res.body, &rr); err != nil || rr.Accepted != 20 {
		t.Fatalf("R reply %s", res.body)
	}
	lines := strings.Split(strings.TrimSpace(ndjson.String()), "\n")
	for _, l := range lines {
		var m map[string]any
		_ = json.Unmarshal([]byte(l), &m)
		sent[m["id"].(string)] = l
	}
	var arr []string
	for i := 0; i < 6; i++ {
		arr = append(arr, dEvent(i, fmt.Sprintf("sess_%d", i%2)))
	}
	res, err = g.post(ctx, "/aep/events", "application/json", nil, "["+strings.Join(arr, ",")+"]")
	if err != nil || res.status != 202 {
		t.Fatalf("D ingest: %v %d %s", err, res.status, res.body)
	}
	var dr ingestReply
	if err := json.Unmarshal(res.body, &dr); err != nil || dr.Accepted != 6 {
		t.Fatalf("D reply %s", res.body)
	}
	for _, e := range arr {
		var m map[string]any
		_ = json.Unmarshal([]byte(e), &m)
		sent[m["id"].(string)] = e
	}
	reported := map[string]position{}
	for _, p := range rr.Positions {
		var m map[string]any
		_ = json.Unmarshal([]byte(lines[p.Index]), &m)
		reported[m["id"].(string)] = p
	}
	for _, p := range dr.Positions {
		reported[p.ID] = p
	}

	topic := prefix + ".default.events"
	recs := readTopic(t, b, b.Seeds, topic, len(sent))
	if len(recs) != len(sent) {
		t.Fatalf("read %d records, sent %d", len(recs), len(sent))
	}
	lastSeq := map[string]int{}
	for _, r := range recs {
		id := hdr(r, "aep-id")
		if string(r.Value) != sent[id] {
			t.Fatalf("record %s bytes differ:\n got %s\nwant %s", id, r.Value, sent[id])
		}
		if hdr(r, "aep-session") != string(r.Key) {
			t.Errorf("record %s key %q, session header %q", id, r.Key, hdr(r, "aep-session"))
		}
		if want := partitioning.Partition(r.Key, 3); r.Partition != want {
			t.Errorf("record %s on partition %d, murmur2 says %d", id, r.Partition, want)
		}
		if p := reported[id]; p.Partition != r.Partition || p.Offset != r.Offset {
			t.Errorf("record %s at %d/%d, the 202 said %d/%d", id, r.Partition, r.Offset, p.Partition, p.Offset)
		}
		wantDialect := "R"
		if strings.HasPrefix(id, "evt_") {
			wantDialect = "D"
			if hdr(r, "aep-target") != "tool:crawler" || hdr(r, "aep-task") != "task_01" {
				t.Errorf("record %s lacks D routing headers: %v", id, r.Headers)
			}
		} else {
			seq := 0
			_, _ = fmt.Sscan(hdr(r, "aep-seq"), &seq)
			if last, ok := lastSeq[string(r.Key)]; ok && seq <= last {
				t.Errorf("session %s out of order: seq %d after %d", r.Key, seq, last)
			}
			lastSeq[string(r.Key)] = seq
		}
		if hdr(r, "aep-dialect") != wantDialect || hdr(r, "aep-type") == "" {
			t.Errorf("record %s headers %v", id, r.Headers)
		}
	}
	g.stop()
}

// A 202 is a promise: SIGKILL the gateway right after it, restart on the
// same --data-dir, and every acknowledged event is there, where the 202 said.
func TestSIGKILLAfter202KeepsEveryAcceptedEvent(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--data-dir", dir, "--embedded-kafka-listen", "127.0.0.1:0", "--topic-partitions", "4"}
	g := startGateway(t, args...)
	ctx := context.Background()

	accepted := map[string]position{}
	events := map[string]string{}
	for batch := 0; batch < 20; batch++ {
		var body strings.Builder
		var ids []string
		for i := 0; i < 25; i++ {
			ev := dEvent(batch*25+i, fmt.Sprintf("sess_%d", i%7))
			body.WriteString(ev + "\n")
			ids = append(ids, fmt.Sprintf("evt_sess_%d_%04d", i%7, batch*25+i))
			events[ids[len(ids)-1]] = ev
		}
		res, err := g.post(ctx, "/aep/events", "application/x-ndjson", nil, body.String())
		if err != nil || res.status != 202 {
			t.Fatalf("batch %d: %v %d %s", batch, err, res.status, res.body)
		}
		var rep ingestReply
		if err := json.Unmarshal(res.body, &rep); err != nil || rep.Accepted != 25 {
			t.Fatalf("batch %d reply %s", batch, res.body)
		}
		for _, p := range rep.Positions {
			accepted[p.ID] = p
		}
	}
	g.kill() // no chance to flush or close anything

	g2 := startGateway(t, args...)
	if g2.KafkaAddr == "" {
		t.Fatal("restarted gateway did not report its embedded broker address")
	}
	recs := readTopic(t, nil, []string{g2.KafkaAddr}, "aep.default.events", len(accepted))
	found := map[string]*kgo.Record{}
	for _, r := range recs {
		found[hdr(r, "aep-id")] = r
	}
	for id, p := range accepted {
		r := found[id]
		if r == nil {
			t.Fatalf("event %s got a 202 at %d/%d and is gone after SIGKILL", id, p.Partition, p.Offset)
		}
		if r.Partition != p.Partition || r.Offset != p.Offset || string(r.Value) != events[id] {
			t.Fatalf("event %s: at %d/%d with %s; 202 said %d/%d", id, r.Partition, r.Offset, r.Value, p.Partition, p.Offset)
		}
	}
	// The restarted gateway keeps serving on the same data.
	res, err := g2.post(ctx, "/aep/events", "application/x-ndjson", nil, dEvent(9999, "sess_after")+"\n")
	if err != nil || res.status != 202 {
		t.Fatalf("after restart: %v %d %s", err, res.status, res.body)
	}
	g2.stop()
}
