package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway/filterworker"
	"github.com/aep-gateway/aep-gateway/gateway/forward"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// newWorkersEnv is a kafkaEnv whose cluster also has the registry (one
// partition) and delivery (four) topics of the workers mode.
func newWorkersEnv(t *testing.T, parts int32) *kafkaEnv {
	return newKafkaEnv(t, parts, kfake.SeedTopics(1, forward.DefaultRegistryTopic), kfake.SeedTopics(4, forward.DefaultDeliveryTopic))
}

func (k *kafkaEnv) node(name string) *Engine {
	return k.engine(func(c *Config) { c.LiveDelivery, c.NodeID = LiveWorkers, name })
}

// worker runs a filter worker of group until the test ends and returns
// its metrics.
func (k *kafkaEnv) worker(group string) *prometheus.Registry {
	k.t.Helper()
	reg := prometheus.NewRegistry()
	w, err := filterworker.New(filterworker.Config{
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(k.cluster.ListenAddrs()...), kgo.FetchMaxWait(200 * time.Millisecond)},
		Group:      group, MetadataMaxAge: time.Second, Logger: zerolog.New(io.Discard), Registerer: reg,
	})
	if err != nil {
		k.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	k.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			k.t.Errorf("worker %s: %v", group, err)
		}
	})
	return reg
}

// joined reports whether s reads the forwarded feed (its catch-up ended in
// a join).
func joined(s *Subscription) bool {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	return s.t.subs[s.id] == s
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
	}
}

// expectStream reads want (event ids, in order per partition) from s,
// skipping a caught-up marker, and checks the sequences run 1, 2, ...
// without a gap.
func expectStream(t *testing.T, s *Subscription, want []string, startSeq uint64) {
	t.Helper()
	wantSet := map[string]bool{}
	for _, id := range want {
		wantSet[id] = true
	}
	last := map[int32]int64{}
	seq := startSeq
	for got := 0; got < len(want); {
		d, ok := recv(t, s)
		if !ok {
			t.Fatalf("stream ended: %v", s.Err())
		}
		if d.CaughtUp() {
			continue
		}
		seq++
		if d.Sequence != seq {
			t.Fatalf("sequence %d, want %d (event %s)", d.Sequence, seq, d.Event.Attrs.ID)
		}
		id := d.Event.Attrs.ID
		if !wantSet[id] {
			t.Fatalf("unexpected or duplicate event %s", id)
		}
		delete(wantSet, id)
		if prev, ok := last[d.Partition()]; ok && d.Offset() <= prev {
			t.Fatalf("partition %d: offset %d after %d", d.Partition(), d.Offset(), prev)
		}
		last[d.Partition()] = d.Offset()
		got++
	}
}

func TestWorkersForwardMatchesToEveryNode(t *testing.T) {
	k := newWorkersEnv(t, 3)
	metrics := k.worker("g1")
	a, b := k.node("node-a"), k.node("node-b")
	ctx := context.Background()
	tasksA, err := a.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=task.*")})
	if err != nil {
		t.Fatal(err)
	}
	defer tasksA.Close()
	allB, err := b.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*")})
	if err != nil {
		t.Fatal(err)
	}
	defer allB.Close()
	if got := len(allB.Start()); got != int(k.parts) {
		t.Fatalf("Start names %d partitions, want %d", got, k.parts)
	}
	waitFor(t, "both subscriptions join the forwarded feed", func() bool { return joined(tasksA) && joined(allB) })

	var wantA, wantB []string
	for i := range 30 {
		typ := "message.sent"
		if i%3 == 0 {
			typ = "task.progress"
		}
		sess := fmt.Sprintf("s%d", i%5)
		k.produce(int32(i%3), typ, sess, i)
		id := fmt.Sprintf("evt_%s_%d", sess, i)
		wantB = append(wantB, id)
		if i%3 == 0 {
			wantA = append(wantA, id)
		}
	}
	expectStream(t, tasksA, wantA, 0)
	expectStream(t, allB, wantB, 0)
	// Nothing else came: the next event for both is next on both.
	k.produce(1, "task.completed", "z", 99)
	expectStream(t, tasksA, []string{"evt_z_99"}, uint64(len(wantA)))
	expectStream(t, allB, []string{"evt_z_99"}, uint64(len(wantB)))
	// Node A got only its matches: 11 records for A, 31 for B.
	if v, _, _ := gatewaytest.MetricSeries(t, metrics, "aep_filterworker_forwarded_total", nil); v < 42 {
		t.Errorf("forwarded %v records, want at least 42", v)
	}
}

func TestWorkersCatchUpHandoverWithDuplicateForwarders(t *testing.T) {
	k := newWorkersEnv(t, 2)
	// Two groups: every record is forwarded twice; the node keeps one.
	k.worker("g1")
	k.worker("g2")
	n := k.node("node-b")
	var want []string
	for i := range 10 {
		k.produce(int32(i%2), "message.sent", "s", i)
		want = append(want, fmt.Sprintf("evt_s_%d", i))
	}
	ctx := context.Background()
	sub, err := n.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*"),
		From: []cursor.PartitionOffset{{Partition: 0, Offset: 0}, {Partition: 1, Offset: 0}}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i := 10; i < 20; i++ {
		k.produce(int32(i%2), "message.sent", "s", i)
		want = append(want, fmt.Sprintf("evt_s_%d", i))
	}
	expectStream(t, sub, want, 0)
	waitFor(t, "the subscription joins the forwarded feed", func() bool { return joined(sub) })
	var more []string
	for i := 20; i < 40; i++ {
		k.produce(int32(i%2), "message.sent", "s", i)
		more = append(more, fmt.Sprintf("evt_s_%d", i))
	}
	expectStream(t, sub, more, 20)
	waitFor(t, "the second copies arrive and are dropped", func() bool {
		sub.t.mu.Lock()
		defer sub.t.mu.Unlock()
		return sub.t.duplicates > 0
	})
	k.produce(0, "message.sent", "s", 99)
	expectStream(t, sub, []string{"evt_s_99"}, 40)
}

func TestWorkersModeWithoutWorkersStillDelivers(t *testing.T) {
	k := newWorkersEnv(t, 2)
	n := k.engine(func(c *Config) {
		c.LiveDelivery, c.NodeID, c.Forward.MarkerWait = LiveWorkers, "lonely", 100*time.Millisecond
	})
	sub, err := n.Subscribe(context.Background(), Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*")})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	k.produce(1, "message.sent", "s", 1)
	// No worker answers: the subscription reads its topic itself.
	expectStream(t, sub, []string{"evt_s_1"}, 0)
	if joined(sub) {
		t.Fatal("joined a feed no worker serves")
	}
}

func TestParseLiveDelivery(t *testing.T) {
	for in, want := range map[string]LiveDelivery{"": LiveTail, "tail": LiveTail, "workers": LiveWorkers} {
		if got, err := ParseLiveDelivery(in); err != nil || got != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	if _, err := ParseLiveDelivery("both"); err == nil {
		t.Error("accepted both")
	}
	_, err := NewEngine(Config{ClientOpts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, LiveDelivery: "x"})
	if err == nil || errors.Is(err, ErrClosed) {
		t.Errorf("NewEngine with a bad mode: %v", err)
	}
}

func TestWorkersReplacedWorkerLosesNothing(t *testing.T) {
	k := newWorkersEnv(t, 3)
	stop := k.stoppableWorker("g1")
	n := k.node("node-a")
	ctx := context.Background()
	sub, err := n.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*")})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	waitFor(t, "the subscription joins the forwarded feed", func() bool { return joined(sub) })
	var want []string
	for i := range 10 {
		k.produce(2, "message.sent", "s", i)
		want = append(want, fmt.Sprintf("evt_s_%d", i))
	}
	expectStream(t, sub, want, 0)
	stop()
	want = want[:0]
	for i := 10; i < 20; i++ {
		k.produce(2, "message.sent", "s", i)
		want = append(want, fmt.Sprintf("evt_s_%d", i))
	}
	k.worker("g1")
	expectStream(t, sub, want, 10)
}

func (k *kafkaEnv) stoppableWorker(group string) func() {
	w, err := filterworker.New(filterworker.Config{
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(k.cluster.ListenAddrs()...), kgo.FetchMaxWait(200 * time.Millisecond)},
		Group:      group, MetadataMaxAge: time.Second, Logger: zerolog.New(io.Discard),
	})
	if err != nil {
		k.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			k.t.Errorf("worker %s: %v", group, err)
		}
	}
}

func TestWorkersLateWorkerTakesOverFromCatchUp(t *testing.T) {
	k := newWorkersEnv(t, 3)
	n := k.engine(func(c *Config) {
		c.LiveDelivery, c.NodeID, c.Forward.MarkerWait = LiveWorkers, "node-a", 50*time.Millisecond
	})
	ctx := context.Background()
	sub, err := n.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*")})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var want []string
	for i := range 10 {
		k.produce(2, "message.sent", "s", i)
		want = append(want, fmt.Sprintf("evt_s_%d", i))
	}
	expectStream(t, sub, want, 0)
	k.worker("g1")
	var more []string
	for i := 10; i < 20; i++ {
		k.produce(2, "message.sent", "s", i)
		more = append(more, fmt.Sprintf("evt_s_%d", i))
	}
	expectStream(t, sub, more, 10)
	waitFor(t, "the subscription joins the forwarded feed", func() bool { return joined(sub) })
	more = more[:0]
	for i := 20; i < 30; i++ {
		k.produce(2, "message.sent", "s", i)
		more = append(more, fmt.Sprintf("evt_s_%d", i))
	}
	expectStream(t, sub, more, 20)
}

func TestWorkersLeaseLostEndsForwardedSubscriptions(t *testing.T) {
	k := newWorkersEnv(t, 2)
	k.worker("g1")
	n := k.engine(func(c *Config) {
		c.LiveDelivery, c.NodeID, c.Forward.LeaseInterval = LiveWorkers, "node-a", 100*time.Millisecond
	})
	sub, err := n.Subscribe(context.Background(), Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*")})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	waitFor(t, "the subscription joins the forwarded feed", func() bool { return joined(sub) })
	// The registry disappears: the lease can no longer be renewed.
	adm := kadm.NewClient(k.prod)
	if _, err := adm.DeleteTopic(context.Background(), forward.DefaultRegistryTopic); err != nil {
		t.Fatal(err)
	}
	for {
		d, ok := recv(t, sub)
		if !ok {
			break
		}
		if d.Event != nil {
			t.Fatalf("unexpected event %s", d.Event.Attrs.ID)
		}
	}
	if !errors.Is(sub.Err(), ErrRegistryLeaseLost) {
		t.Fatalf("ended with %v, want ErrRegistryLeaseLost", sub.Err())
	}
}

// A resume (From) in workers mode replays what it asked for and ends its
// catch-up with the caught-up marker at once, although no worker has
// answered its registration yet (a worker that has not yet found a new
// tenant topic, or none at all): the marker is what ends an R stream's
// held replay window, and dialect R's live.js resume check failed on it.
// The catch-up keeps reading the topic itself, and once a worker's markers
// come it joins the forwarded feed without a gap or a duplicate. Before
// the fix the catch-up first waited MarkerWait without reading, then never
// handed over until the markers came.
func TestWorkersResumeHandsOverWithoutMarkers(t *testing.T) {
	k := newWorkersEnv(t, 2)
	n := k.engine(func(c *Config) {
		c.LiveDelivery, c.NodeID, c.Forward.MarkerWait = LiveWorkers, "node-r", time.Hour
	})
	var want []string
	for i := range 6 {
		k.produce(int32(i%2), "message.sent", "s", i)
		if i >= 2 {
			want = append(want, fmt.Sprintf("evt_s_%d", i))
		}
	}
	sub, err := n.Subscribe(context.Background(), Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*"),
		From: []cursor.PartitionOffset{{Partition: 0, Offset: 1}, {Partition: 1, Offset: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	expectStream(t, sub, want, 0)
	d, ok := recv(t, sub)
	if !ok || !d.CaughtUp() {
		t.Fatalf("after the replay: %+v (ended: %v), want the caught-up marker", d, !ok)
	}
	if d.Replayed != 4 || d.Sequence != 4 {
		t.Fatalf("handover after %d replayed, sequence %d; want 4, 4", d.Replayed, d.Sequence)
	}
	if joined(sub) {
		t.Fatal("joined a feed no worker serves")
	}
	// Live events still come (the catch-up reads on), then a worker
	// answers and the subscription joins its feed without a second marker.
	k.produce(0, "message.sent", "s", 6)
	expectStream(t, sub, []string{"evt_s_6"}, 4)
	k.worker("g1")
	waitFor(t, "the subscription joins the forwarded feed", func() bool { return joined(sub) })
	var more []string
	for i := 7; i < 13; i++ {
		k.produce(0, "message.sent", "s", i) // one partition: one order to expect
		more = append(more, fmt.Sprintf("evt_s_%d", i))
	}
	for i, id := range more {
		d, ok := recv(t, sub)
		if !ok || d.CaughtUp() || d.Event.Attrs.ID != id || d.Sequence != uint64(6+i) {
			t.Fatalf("after joining: %+v (ended: %v), want %s sequence %d", d, !ok, id, 6+i)
		}
	}
}

// refuseRegistryWrites makes the cluster refuse the next n produce
// requests to the registry topic with a non-retriable error (franz-go
// fails their records rather than retrying them itself).
func (k *kafkaEnv) refuseRegistryWrites(n int) {
	k.t.Helper()
	info := k.cluster.TopicInfo(forward.DefaultRegistryTopic)
	if info == nil {
		k.t.Fatal("no registry topic")
	}
	k.cluster.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.ProduceRequest)
		if n == 0 || !slices.ContainsFunc(req.Topics, func(t kmsg.ProduceRequestTopic) bool {
			return t.Topic == forward.DefaultRegistryTopic || t.TopicID == info.TopicID
		}) {
			return nil, nil, false
		}
		n--
		k.cluster.KeepControl()
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		resp.Version = req.Version
		for _, t := range req.Topics {
			rt := kmsg.ProduceResponseTopic{Topic: t.Topic, TopicID: t.TopicID}
			for _, p := range t.Partitions {
				rt.Partitions = append(rt.Partitions, kmsg.ProduceResponseTopicPartition{
					Partition: p.Partition, ErrorCode: kerr.PolicyViolation.Code, BaseOffset: -1})
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
}

// A registration the broker refuses at first is retried until it lands:
// the workers answer it and the subscription joins their feed. Before the
// fix the write was fire-and-forget: refused once, the subscription read
// its topic itself for good.
func TestWorkersRegistrationRetriedUntilItLands(t *testing.T) {
	k := newWorkersEnv(t, 2)
	k.worker("g1")
	reg := prometheus.NewRegistry()
	n := k.engine(func(c *Config) {
		c.LiveDelivery, c.NodeID, c.Registerer = LiveWorkers, "node-r", reg
	})
	ctx := context.Background()
	// The first subscription starts the feed (its lease must land).
	first, err := n.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*")})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	waitFor(t, "the first subscription joins the forwarded feed", func() bool { return joined(first) })

	k.refuseRegistryWrites(3)
	sub, err := n.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=task.*")})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	waitFor(t, "the refused registration lands and the subscription joins", func() bool { return joined(sub) })
	if v, _, _ := gatewaytest.MetricSeries(t, reg, "aep_delivery_registry_write_failures_total", nil); v < 1 {
		t.Errorf("registry write failures counted %v, want at least 1", v)
	}
	k.produce(1, "task.progress", "s", 1)
	expectStream(t, sub, []string{"evt_s_1"}, 0)
}

// A registry write that keeps failing is retried (and counted) until the
// engine closes, and does not hold up Close.
func TestWorkersFailingRegistryWritesStopOnClose(t *testing.T) {
	k := newWorkersEnv(t, 2)
	reg := prometheus.NewRegistry()
	n := k.engine(func(c *Config) {
		c.LiveDelivery, c.NodeID, c.Registerer = LiveWorkers, "node-r", reg
		c.Forward.MarkerWait = 100 * time.Millisecond
	})
	ctx := context.Background()
	first, err := n.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*")})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close() // its Subscribe started the feed: the lease landed
	k.refuseRegistryWrites(1 << 30)
	sub, err := n.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=task.*")})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	waitFor(t, "the refused registration is retried", func() bool {
		v, _, _ := gatewaytest.MetricSeries(t, reg, "aep_delivery_registry_write_failures_total", nil)
		return v >= 2
	})
	closed := make(chan struct{})
	go func() { n.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return within 20s while registry writes failed")
	}
}

// A workers-mode node starts its feed (the workers' topics, its lease)
// with the engine, not at its first live stream: that stream then starts
// at once, and a client that opens it and publishes right after sees its
// own events.
func TestWorkersFeedStartsWithTheEngine(t *testing.T) {
	k := newWorkersEnv(t, 2)
	k.engine(func(c *Config) { c.LiveDelivery, c.NodeID = LiveWorkers, "node-early" })
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.cluster.ListenAddrs()...), kgo.ConsumeTopics(forward.DefaultRegistryTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	leased := false
	waitFor(t, "the node's lease in the registry before any stream", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			leased = leased || string(r.Key) == string(forward.LeaseKey("node-early"))
		})
		return leased
	})
}
