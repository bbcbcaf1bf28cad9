package cursor

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// newCluster starts an in-process kfake cluster with the given topics
// (name -> partitions) and returns client options that reach it.
func newCluster(tb testing.TB, topics map[string]int32) (*kfake.Cluster, []kgo.Opt) {
	tb.Helper()
	c, opts := newClusterNoCleanup(tb, topics)
	tb.Cleanup(c.Close)
	return c, opts
}

func newClusterNoCleanup(tb testing.TB, topics map[string]int32) (*kfake.Cluster, []kgo.Opt) {
	tb.Helper()
	var opts []kfake.Opt
	opts = append(opts, kfake.NumBrokers(1))
	for t, n := range topics {
		opts = append(opts, kfake.SeedTopics(n, t))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return c, []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
}

// event is one record a test produces.
type event struct {
	session string
	epoch   int64
	seq     int64
	noSeq   bool
	offset  int64
	part    int32
}

func (e event) record(topic string) *kgo.Record {
	h := []kgo.RecordHeader{{Key: HeaderSession, Value: []byte(e.session)}, {Key: "aep-dialect", Value: []byte("R")}}
	if !e.noSeq {
		h = append(h,
			kgo.RecordHeader{Key: HeaderEpoch, Value: []byte(strconv.FormatInt(e.epoch, 10))},
			kgo.RecordHeader{Key: HeaderSeq, Value: []byte(strconv.FormatInt(e.seq, 10))})
	}
	return &kgo.Record{Topic: topic, Key: []byte(e.session), Value: []byte(`{"s":` + strconv.FormatInt(e.seq, 10) + `}`), Headers: h}
}

// produce writes evs in order, in batches, and fills in their offsets.
func produce(tb testing.TB, opts []kgo.Opt, topic string, evs []event) {
	tb.Helper()
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, opts...),
		kgo.ProducerBatchMaxBytes(16<<10), kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1<<16))...)
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	const batch = 20000
	for i := 0; i < len(evs); i += batch {
		j := min(i+batch, len(evs))
		recs := make([]*kgo.Record, 0, j-i)
		for _, e := range evs[i:j] {
			recs = append(recs, e.record(topic))
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			tb.Fatal(err)
		}
		for k, r := range recs {
			evs[i+k].offset, evs[i+k].part = r.Offset, r.Partition
		}
	}
}

// partitionOf places a key the way the producer does.
func partitionOf(key string, n int32) int32 {
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic("x").Partition(&kgo.Record{Key: []byte(key)}, int(n)))
}

// sameShard returns count session names that land in partition p of n.
func sameShard(prefix string, p, n int32, count int) []string {
	var out []string
	for i := 0; len(out) < count; i++ {
		s := prefix + strconv.Itoa(i)
		if partitionOf(s, n) == p {
			out = append(out, s)
		}
	}
	return out
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(tb testing.TB, what string, d time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startIndex runs an Indexer and a Resolver over the topics and waits until
// the resolver holds everything the indexer wrote for the events so far.
func startIndex(tb testing.TB, opts []kgo.Opt, events, index string, distance int64, ends map[int32]int64) (*Indexer, *Resolver) {
	tb.Helper()
	ix, err := NewIndexer(IndexerConfig{EventsTopic: events, IndexTopic: index, Group: "indexer", ClientOpts: opts, Distance: distance, Every: 1 << 30})
	if err != nil {
		tb.Fatal(err)
	}
	rv, err := NewResolver(ResolverConfig{EventsTopic: events, IndexTopic: index, ClientOpts: opts, FetchMaxBytes: 32 << 10})
	if err != nil {
		ix.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		rv.Close()
		if err := ix.Close(); err != nil {
			tb.Errorf("indexer: %v", err)
		}
	})
	waitIndexed(tb, ix, rv, ends)
	return ix, rv
}

func waitIndexed(tb testing.TB, ix *Indexer, rv *Resolver, ends map[int32]int64) {
	tb.Helper()
	waitFor(tb, "indexer", 5*time.Minute, func() bool {
		for p, end := range ends {
			if x, _ := ix.Indexed(p); x < end {
				return false
			}
		}
		return true
	})
	waitFor(tb, "resolver", time.Minute, func() bool {
		ok, err := rv.CaughtUp(context.Background())
		return err == nil && ok
	})
}
