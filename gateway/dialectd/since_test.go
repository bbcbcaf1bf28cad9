package dialectd_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/dialectd"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// produceAt writes a dialect D event straight to partition p of the tenant
// topic with the record timestamp at, as the gateway would have written it
// then (a client of its own: a record deadline would count from at).
func (e *sseEnv) produceAt(raw string, p int32, at time.Time) {
	e.t.Helper()
	a, err := aep.Parse([]byte(raw), aep.Limits{})
	if err != nil {
		e.t.Fatal(err)
	}
	cl, err := kgo.NewClient(e.seeds, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	r := &kgo.Record{Topic: "aep.default.events", Partition: p, Key: []byte(a.Session), Value: []byte(raw),
		Headers: partitioning.AppendHeaders(nil, &a), Timestamp: at}
	if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

// TestSSEDSince: since=10m replays, with cursors, the events the log got
// in the last ten minutes and not an hour-old one, then goes live.
func TestSSEDSince(t *testing.T) {
	e := newSSEEnv(t, dialectd.SSEConfig{})
	e.ingest(dEvent("evt_1", "task.submitted", "sess_a")) // creates the topic
	tds, err := e.adm.ListTopics(context.Background(), "aep.default.events")
	if err != nil {
		t.Fatal(err)
	}
	n := int32(len(tds["aep.default.events"].Partitions))
	// on a partition sess_a's event is not on, so the old record is the
	// first of its partition
	e.produceAt(dEvent("evt_old", "task.submitted", "sess_old"), (partitioning.Partition([]byte("sess_a"), n)+1)%n, time.Now().Add(-time.Hour))
	e.ingest(dEvent("evt_2", "task.accepted", "sess_a"))
	s, resp := e.open("types=task.*&since=10m", nil)
	if s == nil {
		t.Fatalf("stream refused: %d", resp.StatusCode)
	}
	got := map[string]string{}
	for range 2 {
		d := s.event()
		if d.Delivery.Mode != "replayable" || d.Delivery.Cursor == "" {
			t.Fatalf("replayed %+v; want replayable with a cursor", d)
		}
		got[d.ID] = d.Type
	}
	if got["evt_1"] != "task.submitted" || got["evt_2"] != "task.accepted" {
		t.Fatalf("since=10m replayed %v; want evt_1 and evt_2", got)
	}
	if d := s.event(); d.Type != "event.replayed" || d.Payload.EventsReplayed != 2 {
		t.Fatalf("after the replay got %+v; want event.replayed of 2 events", d)
	}
	e.ingest(dEvent("evt_3", "task.started", "sess_a"))
	d3 := s.event()
	if d3.ID != "evt_3" {
		t.Fatalf("after the replay got %+v; want the live evt_3 (not the hour-old evt_old)", d3)
	}
	// An EventSource reconnects to the same URL with its Last-Event-ID:
	// that cursor wins, exactly.
	e.ingest(dEvent("evt_4", "task.progress", "sess_a"))
	again, resp := e.open("types=task.*&since=10m", map[string]string{"Last-Event-ID": d3.Delivery.Cursor})
	if again == nil {
		t.Fatalf("stream refused: %d", resp.StatusCode)
	}
	// evt_4 comes first, replayed; or, when the tail had not read it yet
	// as the stream joined, after an event.replayed of nothing, live.
	d := again.event()
	if d.Type == "event.replayed" && d.Payload.EventsReplayed == 0 {
		d = again.event()
	}
	if d.ID != "evt_4" {
		t.Fatalf("since with Last-Event-ID after evt_3 sent %+v first; want evt_4", d)
	}
}

// TestSSEDSinceRejects: since out of bounds, with a cursor, or best_effort.
func TestSSEDSinceRejects(t *testing.T) {
	e := newSSEEnv(t, dialectd.SSEConfig{})
	e.ingest(dEvent("evt_1", "task.submitted", "sess_a"))
	for name, q := range map[string]string{
		"not a duration": "types=*&since=15",
		"past 24h":       "types=*&since=25h",
		"negative":       "types=*&since=-1m",
		"with a cursor":  "types=*&since=1m&from_cursor=x",
		"best_effort":    "types=*&since=1m&delivery_mode=best_effort",
	} {
		t.Run(name, func(t *testing.T) {
			s, resp := e.open(q, nil)
			if s != nil {
				t.Fatal("stream opened")
			}
			defer resp.Body.Close()
			var body struct {
				Error struct {
					Code    string            `json:"code"`
					Details map[string]string `json:"details"`
				} `json:"error"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&body)
			if resp.StatusCode != http.StatusBadRequest || body.Error.Code != "subscription_rejected" || body.Error.Details["field"] != "since" {
				t.Fatalf("%d %+v; want 400 subscription_rejected on field since", resp.StatusCode, body)
			}
		})
	}
}
