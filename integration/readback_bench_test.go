package integration

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkIngestReadBackCheck is the cost of the one case the idempotency
// window cannot make exact (docs/operations.md, "Broker outages"): a retry
// that lands on another node than the ambiguous answer. To catch it, a node
// would have to read, for every ingest request, the tail of the event's
// partition back to the oldest attempt that may still be unresolved
// (--write-timeout, 30 s) and look for the event's id there. "produce" is one
// acks=all write of one 1 KB event (the baseline, same run); "readback-N"
// is the same write preceded by a read of the partition's last N records
// and a scan of their id headers, as such a check would do: N = 1,000 is
// 5 s at 200 events/s per partition, 6,000 is 30 s.
func BenchmarkIngestReadBackCheck(b *testing.B) {
	br := StartBroker(b)
	topic := br.CreateTopic(b, 1, nil)
	cl := br.Client(b, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))
	ctx := context.Background()
	value := bytes.Repeat([]byte("x"), 1024)
	rec := func(i int) *kgo.Record {
		return &kgo.Record{Key: []byte("sess"), Value: value,
			Headers: []kgo.RecordHeader{{Key: "aep-id", Value: fmt.Appendf(nil, "evt_%08d", i)}}}
	}
	const fill = 6000
	recs := make([]*kgo.Record, 0, 500)
	for i := 0; i < fill; i++ {
		recs = append(recs, rec(i))
		if len(recs) == cap(recs) {
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				b.Fatal(err)
			}
			recs = recs[:0]
		}
	}
	n := fill
	produce := func() int64 {
		r := rec(n)
		n++
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			b.Fatal(err)
		}
		return r.Offset
	}
	b.Run("produce", func(b *testing.B) {
		for b.Loop() {
			produce()
		}
	})
	for _, tail := range []int64{1000, 6000} {
		b.Run(fmt.Sprintf("readback-%d", tail), func(b *testing.B) {
			rd := br.Client(b, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(int64(fill))}}),
				kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(64<<20))
			// SetOffsets moves only a partition being consumed: read one
			// record first.
			end := produce() + 1
			rd.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: {0: {Epoch: -1, Offset: end - 1}}})
			for got := false; !got; {
				fs := rd.PollFetches(ctx)
				if err := fs.Err0(); err != nil {
					b.Fatal(err)
				}
				got = fs.NumRecords() > 0
			}
			for b.Loop() {
				from := end - tail
				rd.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: {0: {Epoch: -1, Offset: from}}})
				want := []byte("evt_none")
				found := false
				for next := from; next < end; {
					fs := rd.PollFetches(ctx)
					if err := fs.Err0(); err != nil {
						b.Fatal(err)
					}
					fs.EachRecord(func(r *kgo.Record) {
						next = r.Offset + 1
						for _, h := range r.Headers {
							if h.Key == "aep-id" && bytes.Equal(h.Value, want) {
								found = true
							}
						}
					})
				}
				if found {
					b.Fatal("found an id never written")
				}
				end = produce() + 1
			}
		})
	}
}
