package durable

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// benchFetch builds a fetch of n matching records of partition 0 from
// offset base, with ids evt_<offset>.
func benchFetch(topic string, base int64, n int) (kgo.Fetches, []string) {
	recs := make([]*kgo.Record, n)
	ids := make([]string, n)
	for i := range recs {
		off := base + int64(i)
		ids[i] = fmt.Sprintf("evt_%d", off)
		a := aep.Attrs{Dialect: aep.DialectD, ID: ids[i], Type: "task.updated", Source: "agent:b", Session: fmt.Sprintf("s%d", i%8)}
		recs[i] = &kgo.Record{Topic: topic, Partition: 0, Offset: off, Value: []byte(`{}`), Headers: partitioning.AppendHeaders(nil, &a)}
	}
	return kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: topic, Partitions: []kgo.FetchPartition{{Partition: 0, Records: recs}}}}}}, ids
}

// BenchmarkDurableReadAck is the per-event cost of an at_least_once stream
// on its hot path: header decode, filter, tracker, pending entry and timer
// (read), then the ack by event id. The baseline is the AckTracker alone
// (Delivered + Ack) for the same offsets.
func BenchmarkDurableReadAck(b *testing.B) {
	const batch = 64
	topic := partitioning.Naming{}.Events("bench")
	b.Run("stream", func(b *testing.B) { benchReadAck(b, topic, batch, false) })
	// with the transport's hand-over confirmation of every delivery
	b.Run("stream-handed", func(b *testing.B) { benchReadAck(b, topic, batch, true) })
	b.Run("tracker-baseline", func(b *testing.B) {
		b.ReportAllocs()
		tr := cursor.NewAckTracker(1024)
		_ = tr.Assign(0, 0)
		for i := 0; i < b.N; i += batch {
			base := int64(i)
			for j := range int64(batch) {
				if err := tr.Delivered(0, base+j); err != nil {
					b.Fatal(err)
				}
			}
			for j := range int64(batch) {
				tr.Ack(0, base+j)
			}
		}
	})
}

func benchReadAck(b *testing.B, topic string, batch int, handed bool) {
	b.ReportAllocs()
	s := &DurableStream{
		req: DurableRequest{Filter: mustFilter(b, "types=task.*"), Policy: AckPolicy{}.WithDefaults(), clock: time.Now,
			MaxAckPending: DefaultMaxAckPending},
		topic: topic, parts: 1, tr: cursor.NewAckTracker(1024), ps: make([]partState, 1), byID: map[string][]*pending{},
	}
	if err := s.tr.Assign(0, 0); err != nil {
		b.Fatal(err)
	}
	// fetches are built outside the timer, cycled with fresh offsets
	const rounds = 64
	fetches := make([]kgo.Fetches, rounds)
	idss := make([][]string, rounds)
	for r := range fetches {
		fetches[r], idss[r] = benchFetch(topic, int64(r*batch), batch)
	}
	var out []DurableDelivery
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		r := (i / batch) % rounds
		if r == 0 && i > 0 {
			b.StopTimer()
			s.tr = cursor.NewAckTracker(1024)
			_ = s.tr.Assign(0, 0)
			s.ps[0] = partState{}
			b.StartTimer()
		}
		out = s.read(fetches[r], time.Now(), out[:0])
		if len(out) != batch {
			b.Fatalf("read %d of %d", len(out), batch)
		}
		if handed {
			s.Handed(out...)
		}
		for _, id := range idss[r] {
			if s.Ack(id) != OutcomeApplied {
				b.Fatal("ack not applied")
			}
		}
	}
	if handed && s.stats.Handed == 0 {
		b.Fatal("no hand-over counted")
	}
}
