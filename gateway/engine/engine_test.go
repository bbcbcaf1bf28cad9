package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

const testTenant = "acme"

var testTenantT = tenant.MustParse(testTenant)

type kafkaEnv struct {
	t       *testing.T
	g       *gatewaytest.Kafka
	cluster *kfake.Cluster
	prod    *kgo.Client
	topic   string
	parts   int32
}

func newKafkaEnv(t *testing.T, parts int32, opts ...kfake.Opt) *kafkaEnv {
	t.Helper()
	g := gatewaytest.NewKafka(t, testTenant, parts, opts...)
	return &kafkaEnv{t: t, g: g, cluster: g.Cluster, prod: g.Prod, topic: g.Topic, parts: parts}
}

func (k *kafkaEnv) engine(mutate func(*Config)) *Engine {
	k.t.Helper()
	cfg := Config{ClientOpts: []kgo.Opt{kgo.SeedBrokers(k.cluster.ListenAddrs()...), kgo.FetchMaxWait(200 * time.Millisecond)},
		Logger: zerolog.New(io.Discard)}
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := NewEngine(cfg)
	if err != nil {
		k.t.Fatal(err)
	}
	k.t.Cleanup(e.Close)
	return e
}

// produce writes one dialect D event of type typ in session sess to
// partition p and returns its offset.
func (k *kafkaEnv) produce(p int32, typ, sess string, n int) int64 {
	k.t.Helper()
	return k.g.ProduceD(k.t, p, typ, sess, n)
}

func mustFilter(t testing.TB, q string) *filtering.Filter { return gatewaytest.FilterD(t, q) }

// recv reads one delivery or fails after a generous bound (a hang, not a
// timing assertion).
func recv(t *testing.T, s *Subscription) (Delivery, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, ok := s.Deliveries().Recv(ctx)
	if ctx.Err() != nil {
		t.Fatal("no delivery within 10s")
	}
	return d, ok
}

func TestLiveFanoutByFilter(t *testing.T) {
	k := newKafkaEnv(t, 3)
	e := k.engine(nil)
	ctx := context.Background()
	tasks, err := e.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=task.*")})
	if err != nil {
		t.Fatal(err)
	}
	defer tasks.Close()
	sessB, err := e.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*&session_id=b")})
	if err != nil {
		t.Fatal(err)
	}
	defer sessB.Close()
	if got := len(tasks.Start()); got != int(k.parts) {
		t.Fatalf("Start names %d partitions, want %d", got, k.parts)
	}

	k.produce(0, "task.submitted", "a", 1)
	k.produce(1, "session.ready", "b", 2)
	k.produce(1, "task.progress", "b", 3)
	k.produce(2, "message.sent", "c", 4)

	want := map[*Subscription][]string{tasks: {"evt_a_1", "evt_b_3"}, sessB: {"evt_b_2", "evt_b_3"}}
	for s, ids := range want {
		got := map[string]uint64{}
		for range ids {
			d, ok := recv(t, s)
			if !ok || d.Event == nil {
				t.Fatalf("stream ended or marker: %+v %v", d, s.Err())
			}
			got[d.Event.Attrs.ID] = d.Sequence
		}
		for _, id := range ids {
			if _, ok := got[id]; !ok {
				t.Errorf("missing %s in %v", id, got)
			}
		}
		if got[ids[0]]+got[ids[1]] != 3 {
			t.Errorf("sequences %v, want 1 and 2", got)
		}
	}
	// Nothing else arrives: one more matching event for both comes next.
	k.produce(1, "task.completed", "b", 5)
	for _, s := range []*Subscription{tasks, sessB} {
		d, _ := recv(t, s)
		if d.Event == nil || d.Event.Attrs.ID != "evt_b_5" || d.Sequence != 3 {
			t.Fatalf("got %+v, want evt_b_5 with sequence 3", d)
		}
	}
}

func TestBestEffortDropsVisiblyAndNeverBlocks(t *testing.T) {
	k := newKafkaEnv(t, 1)
	e := k.engine(nil)
	ctx := context.Background()
	slow, err := e.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*"), Queue: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fast, err := e.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*"), Queue: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	for i := range 10 {
		k.produce(0, "task.progress", "s", i)
	}
	for i := range 10 {
		d, ok := recv(t, fast)
		if !ok || d.Sequence != uint64(i+1) {
			t.Fatalf("fast subscriber: %+v", d)
		}
	}
	gatewaytest.Poll(t, "8 drops", func() bool { return slow.Dropped() == 8 })
	for i := range 2 {
		if d, _ := recv(t, slow); d.Sequence != uint64(i+1) {
			t.Fatalf("slow subscriber delivery %d has sequence %d", i, d.Sequence)
		}
	}
	k.produce(0, "task.progress", "s", 10)
	if d, _ := recv(t, slow); d.Sequence != 11 {
		t.Fatalf("after the drops the sequence is %d, want 11 (the gap shows the loss)", d.Sequence)
	}
}

// TestLosslessOverflowFallsBackToCatchUp: a lossless subscription with a
// one-slot queue that reads slowly still gets every event once, in order,
// with contiguous sequences, while a lossy one next to it drops.
func TestLosslessOverflowFallsBackToCatchUp(t *testing.T) {
	const parts, n = 2, 40
	k := newKafkaEnv(t, parts)
	e := k.engine(nil)
	ctx := context.Background()
	s, err := e.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*"), Queue: 1, Lossless: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	lossy, err := e.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*"), Queue: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer lossy.Close()
	for i := range n {
		k.produce(int32(i%parts), "task.progress", "s", i)
	}
	gatewaytest.Poll(t, "a fallback", func() bool { return s.Fallbacks() > 0 && lossy.Dropped() > 0 })
	var next [parts]int64
	seq := uint64(0)
	for seq < n {
		d, ok := recv(t, s)
		if !ok {
			t.Fatalf("stream ended: %v", s.Err())
		}
		if d.CaughtUp() {
			if !d.Fallback || d.Sequence != seq {
				t.Fatalf("marker %+v after sequence %d", d, seq)
			}
			continue
		}
		seq++
		if d.Sequence != seq || d.Offset() != next[d.Partition()] {
			t.Fatalf("got sequence %d offset %d/%d, want %d at %d", d.Sequence, d.Partition(), d.Offset(), seq, next[d.Partition()])
		}
		next[d.Partition()]++
	}
	if s.Dropped() != 0 {
		t.Fatalf("lossless subscription dropped %d", s.Dropped())
	}
	// Once caught up it is live again.
	k.produce(0, "task.progress", "s", n)
	for {
		d, _ := recv(t, s)
		if d.CaughtUp() {
			continue
		}
		if d.Sequence != n+1 || d.Event.Attrs.ID != fmt.Sprintf("evt_s_%d", n) {
			t.Fatalf("live after fallback: %+v", d)
		}
		break
	}
}

// TestCatchUpJoinsTailWithoutGapOrDuplicate replays from the middle of
// every partition while a producer keeps writing, and checks that each
// partition's offsets arrive exactly once, in order, from the start point to
// the last produced offset.
func TestCatchUpJoinsTailWithoutGapOrDuplicate(t *testing.T) {
	const parts, before, during = 3, 30, 60
	k := newKafkaEnv(t, parts)
	e := k.engine(nil)
	ctx := context.Background()
	// A live subscriber keeps the shared tail running and moving.
	live, err := e.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*"), Queue: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	var mid [parts]int64
	for i := range before {
		p := int32(i % parts)
		off := k.produce(p, "task.progress", fmt.Sprintf("s%d", p), i)
		if i/parts == before/parts/2 {
			mid[p] = off
		}
	}
	// The tail is past the start point: the subscription must catch up.
	for range before {
		if _, ok := recv(t, live); !ok {
			t.Fatal("live stream ended")
		}
	}
	var wg sync.WaitGroup
	var last [parts]int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range during {
			p := int32(i % parts)
			last[p] = k.produce(p, "task.progress", fmt.Sprintf("s%d", p), before+i)
		}
	}()
	from := make([]cursor.PartitionOffset, parts)
	for p := range parts {
		from[p] = cursor.PartitionOffset{Partition: int32(p), Offset: mid[p]}
	}
	s, err := e.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*"), From: from, Sequence: 41, Queue: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wg.Wait()

	next := mid
	seq := uint64(41)
	markers := 0
	for next[0] <= last[0] || next[1] <= last[1] || next[2] <= last[2] {
		d, ok := recv(t, s)
		if !ok {
			t.Fatalf("stream ended: %v", s.Err())
		}
		if d.CaughtUp() {
			markers++
			if d.Sequence != seq || len(d.Frontier) != parts || d.Replayed == 0 {
				t.Fatalf("marker %+v after sequence %d", d, seq)
			}
			continue
		}
		seq++
		if d.Sequence != seq {
			t.Fatalf("sequence %d, want %d", d.Sequence, seq)
		}
		p := d.Partition()
		if d.Offset() != next[p] {
			t.Fatalf("partition %d: offset %d, want %d (gap or duplicate at the seam)", p, d.Offset(), next[p])
		}
		next[p]++
	}
	if markers != 1 {
		// The marker may still be queued if the catch-up joined last.
		d, _ := recv(t, s)
		if !d.CaughtUp() {
			t.Fatalf("%d markers, then %+v", markers, d)
		}
	}
	if d, ok, _ := s.Deliveries().Next(); ok {
		t.Fatalf("unexpected extra delivery %+v", d)
	}
}

func TestCatchUpFromEndJoinsImmediately(t *testing.T) {
	k := newKafkaEnv(t, 2)
	e := k.engine(nil)
	end := k.produce(1, "task.progress", "s", 0) + 1
	s, err := e.Subscribe(context.Background(), Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*"),
		From: []cursor.PartitionOffset{{Partition: 1, Offset: end}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, _ := recv(t, s)
	if !d.CaughtUp() || d.Replayed != 0 || d.Frontier[1].Offset != end {
		t.Fatalf("want an immediate marker at %d, got %+v", end, d)
	}
	k.produce(0, "task.progress", "s", 1)
	if d, _ := recv(t, s); d.Event == nil || d.Event.Attrs.ID != "evt_s_1" || d.Sequence != 1 {
		t.Fatalf("live after the marker: %+v", d)
	}
}

func TestCloseEndsStreamsAndReleasesTail(t *testing.T) {
	k := newKafkaEnv(t, 1)
	e := k.engine(nil)
	ctx := context.Background()
	a, err := e.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*")})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	a.Close()
	if _, ok := a.Deliveries().Recv(context.Background()); ok || a.Err() != nil {
		t.Fatalf("after Close: open or Err %v", a.Err())
	}
	e.mu.Lock()
	n := len(e.tails)
	e.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d tails left after the last subscription closed", n)
	}
	b, err := e.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*")})
	if err != nil {
		t.Fatal(err)
	}
	c, err := e.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*"),
		From: []cursor.PartitionOffset{{Partition: 0, Offset: 0}}})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	for _, s := range []*Subscription{b, c} {
		for range s.Deliveries().All() {
		}
		if !errors.Is(s.Err(), ErrClosed) && s.Err() != nil {
			t.Fatalf("Err = %v", s.Err())
		}
		s.Close()
	}
	if !errors.Is(b.Err(), ErrClosed) {
		t.Fatalf("live subscription Err = %v, want ErrClosed", b.Err())
	}
	if _, err := e.Subscribe(ctx, Request{Tenant: testTenantT, Filter: mustFilter(t, "types=*")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Subscribe after Close: %v", err)
	}
}

func TestSubscribeRejectsBadRequests(t *testing.T) {
	k := newKafkaEnv(t, 1)
	e := k.engine(func(c *Config) { c.MaxQueue = 10; c.Queue = 5 })
	ctx := context.Background()
	for name, req := range map[string]Request{
		"no filter": {Tenant: testTenantT},
		"no tenant": {Filter: mustFilter(t, "types=*")},
		"big queue": {Tenant: testTenantT, Filter: mustFilter(t, "types=*"), Queue: 11},
	} {
		if _, err := e.Subscribe(ctx, req); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: err %v, want ErrBadRequest", name, err)
		}
	}
}
