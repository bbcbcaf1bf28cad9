package filterworker

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/forward"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// benchBatch is the source records one iteration publishes.
const benchBatch = 500

// BenchmarkForward is the filter worker's whole path on kfake, per source
// record: publish a batch of 500 (one subscription matching every record),
// then the worker polls it, evaluates it, forwards each record (queued
// under its lock, produced outside it), waits for the acknowledgements and
// commits; an iteration ends when the worker counted every forward.
// Baseline: the same 500 records published, then produced again to the
// delivery topic by a plain client (what a forward costs without the
// worker's consuming, matching and bookkeeping). Compare the two in one
// run: go test -run '^$' -bench Forward -benchmem ./gateway/filterworker/
func BenchmarkForward(b *testing.B) {
	b.Run("worker", func(b *testing.B) {
		e := newEnv(b)
		e.register("n1", "i1", 1, "s1")
		reg, _ := e.start()
		gatewaytest.Poll(b, "the worker to mark the subscription", func() bool {
			return counter(b, reg, "aep_filterworker_markers_total") >= 1
		})
		batch := e.batch()
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			e.produce(batch...)
			want := float64((i + 1) * benchBatch)
			for counter(b, reg, "aep_filterworker_forwarded_total") < want {
				time.Sleep(time.Millisecond)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchBatch), "ns/record")
	})
	b.Run("baseline-produce-twice", func(b *testing.B) {
		e := newEnv(b)
		fwd, err := kgo.NewClient(kgo.SeedBrokers(e.cluster.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
		if err != nil {
			b.Fatal(err)
		}
		defer fwd.Close()
		batch := e.batch()
		out := make([]*kgo.Record, len(batch))
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			e.produce(batch...)
			for j, r := range batch {
				out[j] = &kgo.Record{Topic: forward.DefaultDeliveryTopic, Key: []byte("n1"), Value: r.Value, Headers: r.Headers}
			}
			if err := fwd.ProduceSync(context.Background(), out...).FirstErr(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchBatch), "ns/record")
	})
}

// batch is benchBatch source records of session s1 (a produce overwrites
// their offsets and timestamps: they can be produced again).
func (e *env) batch() []*kgo.Record {
	rs := make([]*kgo.Record, benchBatch)
	for i := range rs {
		rs[i] = e.event("s1", i, 200)
	}
	return rs
}
