package durable

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// logBuffer collects an engine's log lines for a test.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// counterSum is the sum of a counter's series in reg (0 when absent).
func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

var journalTopic = partitioning.Naming{}.Events(testTenant) + ".subjournal"

// A journal record that does not parse is skipped by the follower and by a
// takeover's replay, each time logged and counted, and the stream opens.
func TestDurableJournalUnreadableRecordLoggedAndCounted(t *testing.T) {
	k := newKafkaEnv(t, 1)
	if _, err := newAdm(t, k).CreateTopic(context.Background(), 1, 1, nil, partitioning.Naming{}.DeadLetter(testTenant)); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	logs := &logBuffer{}
	e := k.engine(func(c *Config) { c.Registerer, c.Logger = reg, zerolog.New(logs) })
	const group = "g-unreadable"
	startDurable(t, e, group) // starts the follower
	if err := k.prod.ProduceSync(context.Background(), &kgo.Record{Topic: journalTopic, Partition: 0, Key: []byte("sub_t"), Value: []byte("{not json")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	s := openDurable(t, e, group, AckPolicy{}, 0) // its replay reads the record too
	k.produce(0, "task.updated", "s0", 0)
	if d := recvD(t, s); d.Attempt != 1 {
		t.Fatalf("delivery %+v", d)
	}
	gatewaytest.Poll(t, "the follower and the replay to count the record", func() bool {
		return counterSum(t, reg, "aep_durable_journal_skipped_records_total") >= 2
	})
	if n := strings.Count(logs.String(), "unreadable journal record skipped"); n < 2 {
		t.Fatalf("%d log lines for the unreadable record, want 2 (follower, replay):\n%s", n, logs.String())
	}
}

// A fetch error while a takeover replays the journal fails the opening
// at once (logged, counted): no stream starts from a journal with a hole.
func TestDurableReplayFetchErrorFailsTheOpening(t *testing.T) {
	k := newKafkaEnv(t, 1)
	reg := prometheus.NewRegistry()
	e := k.engine(func(c *Config) { c.Registerer = reg })
	const group = "g-replay-error"
	startDurable(t, e, group)
	on := gatewaytest.FailFetches(k.cluster)
	on.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	began := time.Now()
	s, err := e.OpenDurable(ctx, DurableRequest{Tenant: testTenantT, SubscriptionID: "sub_t", Group: group,
		Filter: mustFilter(t, "types=task.*"), DeadLetter: testDeadLetterCodec})
	on.Store(false)
	if err == nil {
		s.Close()
		t.Fatal("opened over a journal it could not read")
	}
	if errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("after %v: %v, want the fetch error", time.Since(began), err)
	}
	if n := counterSum(t, reg, "aep_durable_journal_fetch_errors_total"); n < 1 {
		t.Fatalf("fetch errors counted: %v", n)
	}
}

// One tenant's journal setup that takes long (its new topic stays unknown
// to ListOffsets, which the setup retries for seconds) does not hold up
// another tenant's.
func TestDurableJournalSetupPerTenant(t *testing.T) {
	k := newKafkaEnv(t, 1)
	e := k.engine(nil)
	slow := tenant.MustParse("slowtenant")
	slowTopic := partitioning.Naming{}.Events(slow.String()) + ".subjournal"
	var asked atomic.Int32
	k.cluster.ControlKey(int16(kmsg.ListOffsets), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		k.cluster.KeepControl()
		req := kr.(*kmsg.ListOffsetsRequest)
		if len(req.Topics) != 1 || req.Topics[0].Topic != slowTopic {
			return nil, nil, false
		}
		asked.Add(1)
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = slowTopic
		for _, rp := range req.Topics[0].Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, kerr.UnknownTopicOrPartition.Code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
		return resp, nil, true
	})
	slowCtx, cancelSlow := context.WithCancel(context.Background())
	defer cancelSlow()
	slowDone := make(chan error, 1)
	go func() {
		_, err := e.journalFor(slowCtx, slow)
		slowDone <- err
	}()
	gatewaytest.Poll(t, "the slow tenant's setup to list offsets", func() bool { return asked.Load() > 0 })
	if _, err := e.journalFor(context.Background(), testTenantT); err != nil {
		t.Fatalf("another tenant's journal: %v", err)
	}
	select {
	case err := <-slowDone:
		t.Fatalf("the other tenant's journal waited for the slow setup to end (%v)", err)
	default:
	}
	cancelSlow()
	select {
	case <-slowDone: //nolint:errcheck // only its end matters here
	case <-time.After(10 * time.Second):
		t.Fatal("the slow setup did not end with its context")
	}
}

// A tenant's journal follower that nothing uses is closed after
// JournalIdle; one that holds a stream is kept; the next use starts a new
// one.
func TestDurableJournalClosedWhenIdle(t *testing.T) {
	old := JournalIdle
	JournalIdle = 10 * time.Millisecond
	t.Cleanup(func() { JournalIdle = old })
	k, e := durableEnv(t, 1)
	const group = "g-idle"
	startDurable(t, e, group)
	s := openDurable(t, e, group, AckPolicy{}, 0)
	current := func() *journal {
		e.jmu.Lock()
		defer e.jmu.Unlock()
		if js := e.journals[testTenant]; js != nil {
			return js.j
		}
		return nil
	}
	j := current()
	// two renewals: the idle check (on the same tick) ran past JournalIdle
	renewals := func() int {
		n := 0
		for _, r := range journalRecords(t, k) {
			if r.T == jRenew {
				n++
			}
		}
		return n
	}
	gatewaytest.Poll(t, "two renewals of the open stream", func() bool { return renewals() >= 2 })
	if current() != j {
		t.Fatal("the journal of an open stream was closed")
	}
	s.Close()
	gatewaytest.Poll(t, "the idle journal to be closed", func() bool { return current() == nil })
	select {
	case <-j.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the idle journal's goroutines did not end")
	}
	if err := e.JournalAcks(context.Background(), testTenantT, "sub_t", []string{"evt_x"}, nil, nil); err != nil {
		t.Fatalf("after the close: %v", err)
	}
	if current() == nil || current() == j {
		t.Fatal("no new journal after the close")
	}
}

// journalRecords reads the test tenant's journal up to its end.
func journalRecords(t *testing.T, k *kafkaEnv) []journalRecord {
	t.Helper()
	var out []journalRecord
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.cluster.ListenAddrs()...),
		kgo.ConsumeTopics(journalTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := newAdm(t, k).ListEndOffsets(context.Background(), journalTopic)
	if err != nil {
		t.Fatal(err)
	}
	lo, _ := ends.Lookup(journalTopic, 0)
	for read := int64(0); read < lo.Offset; {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		fs := cl.PollFetches(ctx)
		err := ctx.Err()
		cancel()
		if err != nil {
			t.Fatalf("journal read: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			read = max(read, r.Offset+1)
			var rec journalRecord
			if json.Unmarshal(r.Value, &rec) == nil {
				out = append(out, rec)
			}
		})
	}
	return out
}
