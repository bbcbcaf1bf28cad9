package gatewaytest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// JournalAcks reads a subscription journal topic (durable.Cluster.JournalTopic)
// from its start to the end offsets it has now, with a client made of
// opts (the broker's seeds), and returns the acks records of subscription
// sub and every id they acknowledge, repeats included.
func JournalAcks(ctx context.Context, tb testing.TB, adm *kadm.Client, opts []kgo.Opt, topic, sub string) (records int, ids []string) {
	tb.Helper()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		tb.Fatal(err)
	}
	left := map[int32]int64{}
	ends.Each(func(lo kadm.ListedOffset) {
		if lo.Offset > 0 {
			left[lo.Partition] = lo.Offset
		}
	})
	cl, err := kgo.NewClient(append(opts[:len(opts):len(opts)], kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			tb.Fatalf("reading the journal %s: %v", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
			var rec struct {
				T string   `json:"t"`
				A []string `json:"a"`
			}
			if string(r.Key) == sub && json.Unmarshal(r.Value, &rec) == nil && rec.T == "acks" {
				records++
				ids = append(ids, rec.A...)
			}
		})
	}
	return records, ids
}
