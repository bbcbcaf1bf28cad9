package integration

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/partitioning"
)

// TestProduceConsumeKeyedBySession writes events keyed by session through an idempotent acks=all
// producer and reads them back with a plain consumer: values and keys byte for byte, headers in order,
// every record on murmur2(key) % 3, and each session's events in the order they were produced.
func TestProduceConsumeKeyedBySession(t *testing.T) {
	b := StartBroker(t)
	const partitions = 3
	topic := b.CreateTopic(t, partitions, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Sessions chosen so that every partition holds at least two of them, plus awkward keys.
	sessions := []string{"a-little-bit-longer-string", "ümlaut-session-✓", ""}
	perPartition := map[int32]int{}
	for i := 0; len(perPartition) < partitions || minCount(perPartition) < 2; i++ {
		s := fmt.Sprintf("sess-%d", i)
		perPartition[partitioning.Partition([]byte(s), partitions)]++
		sessions = append(sessions, s)
	}
	const perSession = 6
	var want []*kgo.Record
	for seq := range perSession {
		for _, s := range sessions {
			key := []byte(s)
			if s == "" {
				key = []byte{0x00, 0xff, 0x10} // a key that is not UTF-8 must survive too
			}
			want = append(want, &kgo.Record{
				Key: key,
				// Not JSON on purpose: the log stores the bytes as received.
				Value: fmt.Appendf([]byte{0xde, 0xad, '\n'}, `{"session":%q,"seq":%d}`, s, seq),
				Headers: []kgo.RecordHeader{
					{Key: "aep-session", Value: []byte(s)},
					{Key: "aep-seq", Value: fmt.Appendf(nil, "%d", seq)},
					{Key: "aep-type", Value: []byte("tool.call.progress")},
					{Key: "aep-empty", Value: nil},
					{Key: "aep-type", Value: []byte("duplicate keys keep their order")},
				},
			})
		}
	}

	producer := b.Client(t,
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotent writes are on by default and need acks=all
		kgo.ProducerLinger(5*time.Millisecond),
	)
	results := producer.ProduceSync(ctx, want...)
	if err := results.FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	if id, epoch, err := producer.ProducerID(ctx); err != nil || id < 0 {
		t.Fatalf("producer is not idempotent: id %d epoch %d err %v", id, epoch, err)
	}
	for _, r := range results {
		if exp := partitioning.Partition(r.Record.Key, partitions); r.Record.Partition != exp {
			t.Fatalf("key %q produced to partition %d, murmur2 says %d", r.Record.Key, r.Record.Partition, exp)
		}
	}

	consumer := b.Client(t,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	var got []*kgo.Record
	for len(got) < len(want) {
		fetches := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before the deadline", len(got), len(want))
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			t.Fatalf("fetch: %v", errs[0].Err)
		}
		got = append(got, fetches.Records()...)
	}
	if len(got) != len(want) {
		t.Fatalf("consumed %d records, produced %d", len(got), len(want))
	}

	// Index what was produced by (key, seq header); then check every consumed record against it.
	type id struct {
		key string
		seq string
	}
	byID := map[id]*kgo.Record{}
	for _, r := range want {
		byID[id{string(r.Key), string(r.Headers[1].Value)}] = r
	}
	lastSeq := map[string]int{}
	usedPartitions := map[int32]bool{}
	for _, r := range got {
		seqHdr := headerValue(r, "aep-seq")
		w, ok := byID[id{string(r.Key), string(seqHdr)}]
		if !ok {
			t.Fatalf("consumed an unexpected record key %q seq %q", r.Key, seqHdr)
		}
		delete(byID, id{string(r.Key), string(seqHdr)})
		if !bytes.Equal(r.Value, w.Value) {
			t.Errorf("key %q: value %q, want %q", r.Key, r.Value, w.Value)
		}
		if !equalHeaders(r.Headers, w.Headers) {
			t.Errorf("key %q: headers %v, want %v", r.Key, r.Headers, w.Headers)
		}
		if exp := partitioning.Partition(r.Key, partitions); r.Partition != exp {
			t.Errorf("key %q on partition %d, want murmur2 placement %d", r.Key, r.Partition, exp)
		}
		usedPartitions[r.Partition] = true
		var seq int
		_, _ = fmt.Sscanf(string(seqHdr), "%d", &seq) // a bad header leaves seq 0: the order check then fails
		if prev, seen := lastSeq[string(r.Key)]; seen && seq != prev+1 {
			t.Errorf("key %q: seq %d after %d, want %d (per-session order)", r.Key, seq, prev, prev+1)
		} else if !seen && seq != 0 {
			t.Errorf("key %q: first consumed seq %d, want 0", r.Key, seq)
		}
		lastSeq[string(r.Key)] = seq
	}
	if len(byID) != 0 {
		t.Errorf("%d produced records never consumed", len(byID))
	}
	// The sessions were picked to cover every partition; a missing one means records went astray.
	if len(usedPartitions) != partitions {
		t.Errorf("records landed on %d partitions, want all %d", len(usedPartitions), partitions)
	}
}

func minCount(m map[int32]int) int {
	least := -1
	for _, n := range m {
		if least < 0 || n < least {
			least = n
		}
	}
	return least
}

func headerValue(r *kgo.Record, key string) []byte {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

// equalHeaders compares headers in order; nil and empty values are the same on the wire.
func equalHeaders(a, b []kgo.RecordHeader) bool {
	return slices.EqualFunc(a, b, func(x, y kgo.RecordHeader) bool {
		return x.Key == y.Key && bytes.Equal(x.Value, y.Value)
	})
}

// BenchmarkProduceSync measures an idempotent acks=all producer writing batches of 100 session-keyed
// 512-byte events to a 3-partition topic on whichever broker the harness chose (run it once with
// KAFKA_BROKERS and once without to compare the real broker with the embedded one).
func BenchmarkProduceSync(b *testing.B) {
	br := StartBroker(b)
	topic := br.CreateTopic(b, 3, nil)
	cl := br.Client(b, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))
	const batch = 100
	value := bytes.Repeat([]byte("x"), 512)
	recs := make([]*kgo.Record, batch)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(batch * int64(len(value)))
	for i := 0; b.Loop(); i++ {
		for j := range recs {
			recs[j] = &kgo.Record{Key: fmt.Appendf(nil, "sess-%d", (i*batch+j)%64), Value: value}
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			b.Fatalf("produce: %v", err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
}
