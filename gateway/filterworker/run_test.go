package filterworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/forward"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

const testTenant = "acme"

// env is a kfake cluster with the workers-mode topics and one tenant
// events topic of one partition, and a plain producer.
type env struct {
	t       testing.TB
	cluster *kfake.Cluster
	prod    *kgo.Client
	topic   string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	topic := partitioning.Naming{}.Events(testTenant)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic, forward.DefaultRegistryTopic),
		kfake.SeedTopics(4, forward.DefaultDeliveryTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	return &env{t: t, cluster: c, prod: prod, topic: topic}
}

func (e *env) produce(rs ...*kgo.Record) {
	e.t.Helper()
	if err := e.prod.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

// register writes a lease of node (incarnation inc) and a subscription of
// the tenant to session into the registry.
func (e *env) register(node, inc string, id uint64, session string) {
	e.t.Helper()
	lease, _ := json.Marshal(forward.Lease{Node: node, Incarnation: inc, TTLMillis: time.Hour.Milliseconds()})
	f, err := filtering.ParseD([]byte(fmt.Sprintf(`{"session_id":%q,"types":["*"]}`, session)))
	if err != nil {
		e.t.Fatal(err)
	}
	sub, _ := json.Marshal(forward.NewSub(node, inc, id, testTenant, f))
	e.produce(&kgo.Record{Topic: forward.DefaultRegistryTopic, Key: forward.LeaseKey(node), Value: lease},
		&kgo.Record{Topic: forward.DefaultRegistryTopic, Key: forward.SubKey(inc, id), Value: sub})
}

// event is a source record of session with a value of size bytes.
func (e *env) event(session string, i, size int) *kgo.Record {
	a := aep.Attrs{Dialect: aep.DialectD, ID: fmt.Sprintf("evt_%d", i), Type: "task.progress", Session: session}
	return &kgo.Record{Topic: e.topic, Key: []byte(session), Value: []byte(strings.Repeat("x", size)),
		Headers: partitioning.AppendHeaders(nil, &a)}
}

// start runs a worker with the extra client options until the test ends;
// it returns the worker's metrics and the channel Run's result arrives on.
func (e *env) start(opts ...kgo.Opt) (*prometheus.Registry, <-chan error) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	return e.startCtx(ctx, opts...)
}

// startCtx is start with Run's context.
func (e *env) startCtx(ctx context.Context, opts ...kgo.Opt) (*prometheus.Registry, <-chan error) {
	e.t.Helper()
	reg := prometheus.NewRegistry()
	w, err := New(Config{
		ClientOpts: append([]kgo.Opt{kgo.SeedBrokers(e.cluster.ListenAddrs()...), kgo.FetchMaxWait(100 * time.Millisecond)}, opts...),
		Group:      "workers", MetadataMaxAge: time.Second, Logger: zerolog.New(io.Discard), Registerer: reg,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return reg, done
}

// counter reads the counter name of reg (0 when it is missing).
func counter(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// A forward that fails while the producer's buffer is full ends Run with
// that forward's error. Before the fix the worker held w.mu across
// Produce while the failed forward's callback waited for w.mu: franz-go
// frees buffer space only after a callback returns, so the next Produce
// waited for space forever and Run never returned.
func TestFailedForwardWithFullBufferEndsRun(t *testing.T) {
	e := newEnv(t)
	e.register("n1", "i1", 1, "s1")
	// One buffered record at a time, and a batch limit the first forward
	// (a source record of 4 KiB) exceeds: it fails in the client.
	reg, done := e.start(kgo.MaxBufferedRecords(1), kgo.ProducerBatchMaxBytes(2048))
	gatewaytest.Poll(t, "the worker to mark the subscription", func() bool {
		return counter(t, reg, "aep_filterworker_markers_total") >= 1
	})
	// One produce, one poll: the failing forward then three more.
	e.produce(e.event("s1", 0, 4096), e.event("s1", 1, 10), e.event("s1", 2, 10), e.event("s1", 3, 10))
	select {
	case err := <-done:
		if !errors.Is(err, kerr.MessageTooLarge) {
			t.Fatalf("Run: %v, want the forward's MessageTooLarge", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of a failed forward: the worker is deadlocked")
	}
	// The poll was not committed: the next worker forwards it again.
	offs, err := kadm.NewClient(e.prod).FetchOffsets(context.Background(), "workers")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup(e.topic, 0); ok && o.At > 0 {
		t.Fatalf("committed offset %d after a failed forward, want none", o.At)
	}
}

// A worker whose forwards the broker never answers stops when its context
// ends. Before the fix it produced with context.Background() under its
// lock: with the buffer full, Produce waited for space forever and Run
// never returned.
func TestRunStopsWhileTheBrokerDoesNotAnswer(t *testing.T) {
	e := newEnv(t)
	e.register("n1", "i1", 1, "s1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg, done := e.startCtx(ctx, kgo.MaxBufferedRecords(1))
	adm := kadm.NewClient(e.prod)
	gatewaytest.Poll(t, "the worker's marker to land", func() bool {
		ends, err := adm.ListEndOffsets(context.Background(), forward.DefaultDeliveryTopic)
		if err != nil {
			return false
		}
		landed := false
		ends.Each(func(lo kadm.ListedOffset) { landed = landed || lo.Offset > 0 })
		return landed
	})
	// From now on the broker takes produce requests to the delivery topic
	// and never answers them.
	info := e.cluster.TopicInfo(forward.DefaultDeliveryTopic)
	e.cluster.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		for _, tp := range kr.(*kmsg.ProduceRequest).Topics {
			if tp.Topic == forward.DefaultDeliveryTopic || tp.TopicID == info.TopicID {
				e.cluster.KeepControl()
				return nil, nil, true
			}
		}
		return nil, nil, false
	})
	e.produce(e.event("s1", 0, 10), e.event("s1", 1, 10), e.event("s1", 2, 10))
	// The first forward fills the buffer (one record) and the next waits
	// for space the broker never frees.
	gatewaytest.Poll(t, "the worker to forward", func() bool {
		return counter(t, reg, "aep_filterworker_forwarded_total") >= 1
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after its context's end: %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of its context's end")
	}
}

// A worker stopped while it is still starting returns nil, as one stopped
// later does: the end of its context is not a failure.
func TestRunStoppedWhileStartingReturnsNil(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, done := e.startCtx(ctx)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of its context's end")
	}
}

// A worker that stops before any commit of its own lands does not cost
// what is published before its replacement starts: the replacement starts
// where the first one did, not at the end. Before the fix the worker
// committed only after its polls (without waiting), so with those commits
// lost (kfake refuses every commit but that of the start, offset 0 here)
// the group had no offset and the replacement started at the end: events
// 3-5 were never forwarded.
func TestReplacementStartsWhereTheFirstWorkerStarted(t *testing.T) {
	e := newEnv(t)
	e.register("n1", "i1", 1, "s1")
	e.cluster.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.OffsetCommitRequest)
		refuse := false
		for _, tp := range req.Topics {
			for _, p := range tp.Partitions {
				refuse = refuse || p.Offset != 0
			}
		}
		e.cluster.KeepControl()
		if !refuse {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		resp.Version = req.Version
		for _, tp := range req.Topics {
			rt := kmsg.OffsetCommitResponseTopic{Topic: tp.Topic}
			for _, p := range tp.Partitions {
				rt.Partitions = append(rt.Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: p.Partition, ErrorCode: kerr.OffsetMetadataTooLarge.Code})
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, done := e.startCtx(ctx)
	gatewaytest.Poll(t, "the first worker to mark the subscription", func() bool {
		return counter(t, first, "aep_filterworker_markers_total") >= 1
	})
	e.produce(e.event("s1", 0, 10), e.event("s1", 1, 10), e.event("s1", 2, 10))
	gatewaytest.Poll(t, "the first worker to forward", func() bool {
		return counter(t, first, "aep_filterworker_forwarded_total") >= 3
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.produce(e.event("s1", 3, 10), e.event("s1", 4, 10), e.event("s1", 5, 10))
	second, _ := e.start()
	// From offset 0: 0-2 again (the nodes drop those copies), then 3-5.
	gatewaytest.Poll(t, "the replacement to forward what was published without a worker", func() bool {
		return counter(t, second, "aep_filterworker_forwarded_total") >= 6
	})
}
