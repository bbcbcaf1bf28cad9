package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// EnvDManifestReport names the file TestDManifestLevels appends its lines
// to (CI prints it).
const EnvDManifestReport = "AEP_IT_DMANIFEST_REPORT"

// dClaimedLevel is the conformance level the gateway claims for dialect D
// (docs/dialects.md, "Conformance level"): every fixture of the manifest
// at or below it must pass.
const dClaimedLevel = "AEP-C3"

var dLevelOrder = map[string]int{"AEP-C0": 0, "AEP-C1": 1, "AEP-C2": 2, "AEP-C3": 3}

type dManifest struct {
	Levels   []string `json:"levels"`
	Fixtures []struct {
		Path          string         `json:"path"`
		Level         string         `json:"level"`
		Expectation   string         `json:"expectation"`
		ExpectedTypes []string       `json:"expected_types"`
		ExpectedStats map[string]int `json:"expected_stats"`
	} `json:"fixtures"`
}

// TestDManifestLevels runs dialect D's own conformance manifest
// (axisrobo/aep conformance/manifest.json at the 0.1 commit, vendored in
// aep/testdata) through the gateway binary, every fixture at or below the
// claimed level, each in a tenant of its own (the fixtures reuse ids,
// sessions and task ids):
//
//   - accept_all: ingest accepts every event (202, none rejected);
//   - stateful_flow: accepted, and once the task-state worker has judged
//     the tenant's log, it holds no event.rejected (the manifest: "accepted
//     by the reference harness without producing event.rejected");
//   - delivery_e2e: the fixture's events through a durable subscription,
//     the consumer acting as the fixture tells (acks evt_c3_003 with the
//     fixture's own event.acknowledged, leaves evt_c3_001 to be redelivered
//     once, rejects evt_c3_002 as retryable until its 3 attempts are spent)
//     and the subscription's counters equal expected_stats.
//
// And the other side of C1: an illegal transition gets its event.rejected,
// which a D subscriber receives.
func TestDManifestLevels(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "aep", "testdata", "d-manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m dManifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m.Levels, []string{"AEP-C0", "AEP-C1", "AEP-C2", "AEP-C3"}) || len(m.Fixtures) != 7 {
		t.Fatalf("manifest levels %v, %d fixtures: not the 0.1 manifest", m.Levels, len(m.Fixtures))
	}
	b := StartBroker(t)
	prefix := strings.ReplaceAll(TopicName(t), "_", "-")
	keys := filepath.Join(t.TempDir(), "keys")
	var lines strings.Builder
	tenantOf := func(path string) string {
		return "fx-" + strings.TrimSuffix(filepath.Base(path), ".ndjson")
	}
	for _, f := range m.Fixtures {
		lines.WriteString(keyFileLine(tenantOf(f.Path), "k-"+tenantOf(f.Path)))
	}
	lines.WriteString(keyFileLine("fx-illegal", "k-fx-illegal"))
	if err := os.WriteFile(keys, []byte(lines.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "--kafka-brokers", strings.Join(b.Seeds, ","), "--api-keys", keys,
		"--topic-template", prefix+".{tenant}.events", "--topic-partitions", "3", "--topic-replication-factor", "1")
	admCl, err := kgo.NewClient(kgo.SeedBrokers(b.Seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	group := "aep-task-states." + prefix + ".tenant.events"
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// the fixtures in parallel, each in its tenant: the task-state worker
	// finds a new tenant's topic at its next metadata refresh (10 s)
	t.Run("manifest", func(t *testing.T) {
		for _, f := range m.Fixtures {
			if dLevelOrder[f.Level] > dLevelOrder[dClaimedLevel] {
				continue
			}
			t.Run(f.Level+" "+f.Path, func(t *testing.T) {
				t.Parallel()
				tenant := tenantOf(f.Path)
				key := "k-" + tenant
				body, err := os.ReadFile(filepath.Join("..", "aep", "testdata", "d-"+filepath.Base(f.Path)))
				if err != nil {
					t.Fatal(err)
				}
				var types []string
				sc := bufio.NewScanner(bytes.NewReader(body))
				for sc.Scan() {
					var e struct {
						Type string `json:"type"`
					}
					if json.Unmarshal(sc.Bytes(), &e) == nil && e.Type != "" {
						types = append(types, e.Type)
					}
				}
				if !reflect.DeepEqual(types, f.ExpectedTypes) {
					t.Fatalf("fixture types %v, manifest expects %v", types, f.ExpectedTypes)
				}
				var sub *manifestSub
				if f.Expectation == "delivery_e2e" {
					sub = openManifestSub(ctx, t, g, key)
				}
				res, err := g.post(ctx, "/aep/events", "application/x-ndjson", map[string]string{"Authorization": "Bearer " + key}, string(body))
				var ans struct {
					Accepted int `json:"accepted"`
					Rejected int `json:"rejected"`
				}
				if err != nil || res.status != http.StatusAccepted || json.Unmarshal(res.body, &ans) != nil || ans.Accepted != len(types) || ans.Rejected != 0 {
					t.Fatalf("ingest: %v %d %s (want all %d accepted)", err, res.status, res.body, len(types))
				}
				detail := fmt.Sprintf("%d events accepted", ans.Accepted)
				switch f.Expectation {
				case "stateful_flow", "delivery_e2e":
					topic := prefix + "." + tenant + ".events"
					rejected := judgedRejections(ctx, t, adm, b.Seeds, group, topic)
					if len(rejected) != 0 {
						t.Fatalf("the task-state worker rejected %v", rejected)
					}
					detail += ", the task-state worker judged them all and rejected none"
				}
				if sub != nil {
					detail += ", " + sub.run(ctx, t, f.ExpectedStats)
				}
				line := fmt.Sprintf("TestDManifestLevels: %s %s %s: PASS (%s)", f.Level, f.Path, f.Expectation, detail)
				t.Log(line)
				appendReport(t, EnvDManifestReport, line)
			})
		}
	})

	t.Run("an illegal transition gets its event.rejected", func(t *testing.T) {
		key := "k-fx-illegal"
		stream := openDStream(ctx, t, g, key, "/aep/events?types=event.rejected")
		events := strings.Join([]string{
			manifestTask("evt_il_1", "task.submitted", "task_il"),
			manifestTask("evt_il_2", "task.accepted", "task_il"),
			manifestTask("evt_il_3", "task.completed", "task_il"), // accepted → completed: not started
		}, "\n") + "\n"
		res, err := g.post(ctx, "/aep/events", "application/x-ndjson", map[string]string{"Authorization": "Bearer " + key}, events)
		if err != nil || res.status != http.StatusAccepted {
			t.Fatalf("ingest: %v %d %s", err, res.status, res.body)
		}
		msgs := readSSE(ctx, t, stream, 1)
		var rej struct {
			Type        string `json:"type"`
			Source      string `json:"source"`
			Target      string `json:"target"`
			CausationID string `json:"causation_id"`
			TaskID      string `json:"task_id"`
			Payload     struct {
				AcknowledgedEventID string `json:"acknowledged_event_id"`
				Error               struct {
					Code      string `json:"code"`
					Message   string `json:"message"`
					Retryable *bool  `json:"retryable"`
				} `json:"error"`
			} `json:"payload"`
		}
		if err := json.Unmarshal([]byte(msgs[0].data), &rej); err != nil || rej.Type != "event.rejected" || rej.CausationID != "evt_il_3" ||
			rej.Payload.AcknowledgedEventID != "evt_il_3" || rej.Target != "agent:manifest" || rej.TaskID != "task_il" ||
			rej.Payload.Error.Code != "task_error" || rej.Payload.Error.Retryable == nil || *rej.Payload.Error.Retryable ||
			!strings.Contains(rej.Payload.Error.Message, "accepted → completed") {
			t.Fatalf("rejection %s: %v", msgs[0].data, err)
		}
		line := "TestDManifestLevels: an illegal transition (accepted → completed) got event.rejected task_error from " + rej.Source + ", delivered to a D subscriber"
		t.Log(line)
		appendReport(t, EnvDManifestReport, line)
	})
}

func manifestTask(id, typ, task string) string {
	return fmt.Sprintf(`{"aep_version":"0.1","id":%q,"type":%q,"source":"agent:manifest","session_id":"sess_il","task_id":%q,"created_at":"2026-07-09T10:00:00Z","payload":{"task_id":%q}}`, id, typ, task, task)
}

// judgedRejections waits until the task-state worker's group has
// committed the end of every partition of topic (it judged everything),
// then returns the causation ids of the event.rejected records in it.
func judgedRejections(ctx context.Context, t *testing.T, adm *kadm.Client, seeds []string, group, topic string) []string {
	t.Helper()
	gatewaytest.PollFor(t, time.Minute, "the task-state worker to judge "+topic, func() bool {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return false
		}
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return false
		}
		done := true
		ends.Each(func(e kadm.ListedOffset) {
			c, ok := offs.Lookup(topic, e.Partition)
			if e.Offset > 0 && (!ok || c.At < e.Offset) {
				done = false
			}
		})
		return done
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(0)
	ends.Each(func(e kadm.ListedOffset) { want += e.Offset })
	var out []string
	for n := int64(0); n < want; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s", n, want, topic)
		}
		fs.EachRecord(func(r *kgo.Record) {
			n++
			var e struct {
				Type        string `json:"type"`
				Source      string `json:"source"`
				CausationID string `json:"causation_id"`
			}
			if json.Unmarshal(r.Value, &e) == nil && e.Type == "event.rejected" && e.Source == "gateway:aep-gateway" {
				out = append(out, e.CausationID)
			}
		})
	}
	return out
}

// openDStream opens a dialect D SSE stream of key's tenant.
func openDStream(ctx context.Context, t *testing.T, g *gatewayProc, key, path string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("open %s: %v %v", path, err, resp)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// manifestSub is the durable subscription of the C3 fixture.
type manifestSub struct {
	g   *gatewayProc
	key string
	id  string
	sse *gatewaytest.SSEStream // one reader for the whole response
}

// next reads n messages carrying data.
func (s *manifestSub) next(ctx context.Context, t *testing.T, n int) []gatewaytest.SSEMessage {
	t.Helper()
	deadline, _ := ctx.Deadline()
	var out []gatewaytest.SSEMessage
	for len(out) < n {
		m, err := s.sse.TryNext(min(time.Until(deadline), 30*time.Second))
		if err != nil {
			t.Fatalf("the subscription's stream did not deliver %d messages in time (%d read): %v", n, len(out), err)
		}
		if m.HasData {
			out = append(out, m)
		}
	}
	return out
}

func openManifestSub(ctx context.Context, t *testing.T, g *gatewayProc, key string) *manifestSub {
	t.Helper()
	s := &manifestSub{g: g, key: key}
	code, body := s.do(ctx, t, http.MethodPost, "/aep/subscriptions", `{"types":["task.*"],"max_attempts":3,"ack_timeout_ms":3600000}`)
	var created struct {
		ID string `json:"subscription_id"`
	}
	if err := json.Unmarshal(body, &created); code != http.StatusCreated || err != nil {
		t.Fatalf("create: %d %s", code, body)
	}
	s.id = created.ID
	s.sse = gatewaytest.NewSSEStream(t, openDStream(ctx, t, g, key, "/aep/subscriptions/"+s.id+"/stream"), 0)
	return s
}

func (s *manifestSub) do(ctx context.Context, t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, method, s.g.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// run plays the C3 fixture's consumer and compares the subscription's
// counters with expected_stats.
func (s *manifestSub) run(ctx context.Context, t *testing.T, want map[string]int) string {
	t.Helper()
	for _, m := range s.next(ctx, t, 3) {
		if m.Event != "task.submitted" && m.Event != "task.started" && m.Event != "task.progress" {
			t.Fatalf("first deliveries: %+v", m)
		}
	}
	ack := func(body string) {
		t.Helper()
		code, b := s.do(ctx, t, http.MethodPost, "/aep/subscriptions/"+s.id+"/acks", body)
		if code != http.StatusOK || strings.Contains(string(b), `"invalid"`) {
			t.Fatalf("acks %s: %d %s", body, code, b)
		}
	}
	nack := func(id string) {
		ack(fmt.Sprintf(`{"aep_version":"0.1","id":"evt_nack_%s_%d","type":"event.rejected","source":"agent:researcher","created_at":"2026-07-10T10:05:00Z","payload":{"acknowledged_event_id":%q,"error":{"code":"session_timeout","message":"consumer unresponsive","retryable":true}}}`, id, time.Now().UnixNano(), id))
	}
	// the fixture's own acknowledgement of evt_c3_003
	ack(`{"aep_version":"0.1","id":"evt_c3_ack_001","type":"event.acknowledged","source":"agent:researcher","target":"tool:crawler","session_id":"sess_c3","causation_id":"evt_c3_003","created_at":"2026-07-10T10:00:03Z","payload":{"acknowledged_event_id":"evt_c3_003","cursor":"stream_01:3"}}`)
	// evt_c3_001 is redelivered once (attempt 2, the fixture's
	// event.redelivered), with the later pending event of its session
	nack("evt_c3_001")
	got := map[string]int{}
	for _, m := range s.next(ctx, t, 4) {
		var n struct {
			Payload struct {
				OriginalEventID string `json:"original_event_id"`
				Attempt         int    `json:"attempt"`
			} `json:"payload"`
		}
		if m.Event == "event.redelivered" && json.Unmarshal([]byte(m.Data), &n) == nil {
			got[n.Payload.OriginalEventID] = n.Payload.Attempt
		}
	}
	if got["evt_c3_001"] != 2 || got["evt_c3_002"] != 2 {
		t.Fatalf("redeliveries %v, want evt_c3_001 and evt_c3_002 at attempt 2", got)
	}
	// evt_c3_002 is rejected as retryable until its 3 attempts are spent
	nack("evt_c3_002")
	s.next(ctx, t, 2) // event.redelivered, attempt 3, and the event
	nack("evt_c3_002")
	m := s.next(ctx, t, 1)[0]
	if m.Event != "event.dead_lettered" || !strings.Contains(m.Data, `"original_event_id":"evt_c3_002"`) || !strings.Contains(m.Data, `"attempts":3`) || !strings.Contains(m.Data, `"session_timeout"`) {
		t.Fatalf("after the third attempt: %+v (want the dead letter of evt_c3_002, 3 attempts, session_timeout)", m)
	}
	var st struct {
		Pending      int `json:"pending_acks"`
		Acked        int `json:"acked"`
		DeadLettered int `json:"dead_lettered"`
	}
	gatewaytest.Poll(t, "the subscription's counters", func() bool {
		_, b := s.do(ctx, t, http.MethodGet, "/aep/subscriptions/"+s.id, "")
		return json.Unmarshal(b, &st) == nil && st.DeadLettered == 1
	})
	if st.Pending != want["pending"] || st.Acked != want["acknowledged"] || st.DeadLettered != want["deadLettered"] {
		t.Fatalf("subscription counters pending %d, acknowledged %d, dead-lettered %d; the manifest expects %v", st.Pending, st.Acked, st.DeadLettered, want)
	}
	return fmt.Sprintf("through a durable subscription: pending %d, acknowledged %d, dead-lettered %d as expected_stats", st.Pending, st.Acked, st.DeadLettered)
}
