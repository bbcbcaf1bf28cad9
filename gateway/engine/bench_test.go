package engine

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/internal/queue"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

var benchEvent = []byte(`{"aep_version":"0.1","id":"evt_01JZ0000000000000000000000","type":"task.progress","source":"agent:researcher","target":"tool:crawler","task_id":"task_01","session_id":"sess_01","created_at":"2026-07-09T10:00:00Z","payload":{"progress":0.5,"message":"crawling page 3 of 10"}}`)

// benchTail builds a tail with subs subscriptions (half matching the
// benchmark records) and no Kafka client: dispatch alone is measured.
func benchTail(b *testing.B, subs int) (*tail, []*Subscription) {
	t := &tail{index: filtering.NewIndex(), pos: make([]int64, 1), subs: map[filtering.ID]*Subscription{}}
	var out []*Subscription
	for i := range subs {
		sess := "sess_01"
		if i%2 == 1 {
			sess = fmt.Sprintf("other_%d", i)
		}
		s := &Subscription{t: t, id: filtering.ID(i + 1), filter: mustFilter(b, "types=task.*&session_id="+sess), q: queue.New[Delivery](1024), guard: make([]int64, 1)}
		t.subs[s.id] = s
		t.index.Add(s.id, s.filter)
		out = append(out, s)
	}
	return t, out
}

func benchFetches(n int) kgo.Fetches {
	a := aep.Attrs{Dialect: aep.DialectD, ID: "evt_1", Type: "task.progress", Source: "agent:researcher", Session: "sess_01", Task: "task_01", Target: "tool:crawler"}
	hs := partitioning.AppendHeaders(nil, &a)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "aep.acme.events", Value: benchEvent, Headers: hs, Offset: int64(i)}
	}
	return kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "aep.acme.events", Partitions: []kgo.FetchPartition{{Records: recs}}}}}}
}

// BenchmarkTailDispatch: per-record cost of the shared tail (header decode,
// index match, one offer per matching subscription), with the index match
// alone as the baseline. Queues are drained after each batch.
func BenchmarkTailDispatch(b *testing.B) {
	const batch = 100
	for _, n := range []int{2, 100, 1000} {
		t, subs := benchTail(b, n)
		fs := benchFetches(batch)
		b.Run(fmt.Sprintf("baseline-decode+match/subs=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var a aep.Attrs
			var ids []filtering.ID
			hs := fs[0].Topics[0].Partitions[0].Records[0].Headers
			for b.Loop() {
				for range batch {
					_ = partitioning.DecodeHeaders(hs, &a)
					ids = t.index.Match(&a, ids[:0])
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/record")
		})
		b.Run(fmt.Sprintf("dispatch/subs=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				t.dispatch(fs)
				for _, s := range subs {
					for _, ok, _ := s.q.Next(); ok; _, ok, _ = s.q.Next() {
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/record")
		})
	}
}
