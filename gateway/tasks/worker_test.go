package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/filterworker"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

const topic = "aep.t1.events"

type env struct {
	t  *testing.T
	k  *kfake.Cluster
	cl *kgo.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &env{t: t, k: k, cl: cl}
}

// task writes a D task event as ingest writes it: value and routing
// headers, keyed by the session, to partition p.
func (e *env) task(p int32, id, typ, task string) {
	e.t.Helper()
	if err := e.cl.ProduceSync(context.Background(), taskRecord(p, id, typ, task)).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

func taskRecord(p int32, id, typ, task string) *kgo.Record {
	a := aep.Attrs{Dialect: aep.DialectD, ID: id, Type: typ, Source: "agent:worker", Session: "sess_" + task, Task: task}
	v := fmt.Sprintf(`{"aep_version":"0.1","id":%q,"type":%q,"source":"agent:worker","session_id":%q,"task_id":%q,"created_at":"2026-07-09T10:00:00Z","payload":{"task_id":%q}}`, id, typ, a.Session, task, task)
	hdrs, _ := partitioning.AppendHeadersTo(nil, nil, &a)
	return &kgo.Record{Topic: topic, Partition: p, Key: []byte(a.Session), Value: []byte(v), Headers: hdrs}
}

// start runs a worker of group until the test ends or stop is called.
func (e *env) start(group string) (stop func()) { return e.startGather(group, 0) }

// startGather is start with Config.Gather set.
func (e *env) startGather(group string, gather time.Duration) (stop func()) {
	e.t.Helper()
	w, err := New(Config{ClientOpts: []kgo.Opt{kgo.SeedBrokers(e.k.ListenAddrs()...), kgo.FetchMaxWait(100 * time.Millisecond)},
		TopicRegexp: filterworker.TopicRegexp(partitioning.Naming{}), Group: group, Logger: zerolog.New(io.Discard), Gather: gather})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("worker: %v", err)
		}
	}
	e.t.Cleanup(stop)
	return stop
}

type rejection struct {
	ID, Type, Target, Causation, Task string
	Payload                           struct {
		Acked string `json:"acknowledged_event_id"`
		Error struct {
			Code      string
			Message   string
			Retryable bool
		}
	}
}

// rejections reads every event.rejected in the topic (ids may repeat).
func (e *env) rejections() []rejection {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(e.cl).ListEndOffsets(ctx, topic)
	if err != nil {
		e.t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.k.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	want := int64(0)
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	var out []rejection
	for n := int64(0); n < want; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			e.t.Fatalf("read %d of %d records", n, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			n++
			var a aep.Attrs
			if partitioning.DecodeHeaders(r.Headers, &a) != nil || a.Type != "event.rejected" {
				return
			}
			var rj struct {
				ID          string `json:"id"`
				Type        string `json:"type"`
				Target      string `json:"target"`
				CausationID string `json:"causation_id"`
				TaskID      string `json:"task_id"`
				Payload     json.RawMessage
			}
			if err := json.Unmarshal(r.Value, &rj); err != nil {
				e.t.Fatalf("rejection %s: %v", r.Value, err)
			}
			x := rejection{ID: rj.ID, Type: rj.Type, Target: rj.Target, Causation: rj.CausationID, Task: rj.TaskID}
			_ = json.Unmarshal(rj.Payload, &x.Payload)
			if a.ID != rj.ID || a.Causation != rj.CausationID || a.Task != rj.TaskID {
				e.t.Fatalf("headers %+v do not route the rejection %s", a, r.Value)
			}
			out = append(out, x)
		})
	}
	return out
}

// causes is the set of events rejected (by causation id), sorted.
func causes(rs []rejection) []string {
	m := map[string]bool{}
	for _, r := range rs {
		m[r.Causation] = true
	}
	var out []string
	for c := range m {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// Legal flows get no rejection; each illegal event gets exactly one, with
// the fields the spec's error model asks for, in its partition. Some are
// written while the worker is still joining its group: a partition the
// group never committed is judged from the log's start.
func TestWorkerRejectsIllegalTransitionsOnly(t *testing.T) {
	e := newEnv(t)
	stop := e.start("g1")
	e.task(0, "evt_a1", "task.submitted", "task_a")
	e.task(0, "evt_a2", "task.accepted", "task_a")
	e.task(0, "evt_a3", "task.started", "task_a")
	e.task(0, "evt_a4", "task.completed", "task_a")
	e.task(0, "evt_a5", "task.progress", "task_a") // after terminal
	e.task(1, "evt_b1", "task.progress", "task_b") // never submitted: not judged
	e.task(1, "evt_b2", "task.submitted", "task_b")
	e.task(1, "evt_b3", "task.submitted", "task_b") // duplicate
	e.task(1, "evt_c1", "task.submitted", "task_c")
	e.task(1, "evt_c2", "task.completed", "task_c") // skips acceptance and start
	e.task(1, "evt_c3", "task.submitted", "task_c") // duplicate
	gatewaytest.Poll(t, "four rejections", func() bool { return len(e.rejections()) >= 4 })
	time.Sleep(300 * time.Millisecond)
	stop()
	rs := e.rejections()
	if got := strings.Join(causes(rs), ","); got != "evt_a5,evt_b3,evt_c2,evt_c3" || len(rs) != 4 {
		t.Fatalf("rejected %s (%d records), want evt_a5,evt_b3,evt_c2,evt_c3 once each", got, len(rs))
	}
	for _, r := range rs {
		if r.Type != "event.rejected" || r.Target != "agent:worker" || r.Payload.Acked != r.Causation || r.Payload.Error.Code != "task_error" ||
			r.Payload.Error.Retryable || r.Payload.Error.Message == "" || !strings.HasPrefix(r.ID, "evt_task_rejected_") {
			t.Fatalf("rejection %+v", r)
		}
	}
}

// A worker stopped halfway and one started after it (same group) judge the
// rest with the states rebuilt from the log: the event that breaks a state
// set before the restart is rejected, and nothing judged before is
// rejected again under another id. Two workers of the group at once split
// the partitions and agree on the ids.
func TestWorkerRestartRebuildsStatesAndKeepsIDs(t *testing.T) {
	e := newEnv(t)
	stop := e.start("g2")
	e.task(0, "evt_1", "task.submitted", "task_x")
	e.task(0, "evt_2", "task.accepted", "task_x")
	e.task(0, "evt_3", "task.progress", "task_x") // illegal: not started
	gatewaytest.Poll(t, "the first rejection", func() bool { return len(e.rejections()) == 1 })
	time.Sleep(300 * time.Millisecond) // its commit
	stop()
	e.task(0, "evt_4", "task.started", "task_x")   // legal only with the state from before the restart
	e.task(0, "evt_5", "task.submitted", "task_x") // duplicate: needs it too
	e.task(1, "evt_6", "task.submitted", "task_y")
	e.task(1, "evt_7", "task.started", "task_y")
	e.task(1, "evt_8", "task.accepted", "task_y") // started → accepted: backwards
	e.start("g2")
	e.start("g2")
	gatewaytest.Poll(t, "the rejections after the restart", func() bool { return len(causes(e.rejections())) == 3 })
	time.Sleep(time.Second)
	rs := e.rejections()
	ids := map[string]string{}
	for _, r := range rs {
		if prev, ok := ids[r.Causation]; ok && prev != r.ID {
			t.Fatalf("%s rejected under two ids: %s and %s", r.Causation, prev, r.ID)
		}
		ids[r.Causation] = r.ID
	}
	if got := strings.Join(causes(rs), ","); got != "evt_3,evt_5,evt_8" {
		t.Fatalf("rejected %s, want evt_3,evt_5,evt_8 (evt_4 is legal after the rebuilt accepted state)", got)
	}
}

// A worker waiting between polls at the tail (Config.Gather) stops at once
// when its context ends.
func TestWorkerStopEndsAGather(t *testing.T) {
	e := newEnv(t)
	// One batch, so that the worker's first fetch (one batch at most,
	// internal/fetchsize) judges both before its first gather.
	if err := e.cl.ProduceSync(context.Background(), taskRecord(0, "evt_g1", "task.submitted", "task_g"),
		taskRecord(0, "evt_g2", "task.submitted", "task_g")).FirstErr(); err != nil { // a duplicate
		t.Fatal(err)
	}
	stop := e.startGather("g-gather", time.Hour)
	gatewaytest.Poll(t, "the rejection", func() bool { return len(e.rejections()) >= 1 })
	done := make(chan struct{})
	go func() { stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker's stop waited for its hour-long gather")
	}
}
