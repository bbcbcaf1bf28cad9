package durable

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// deadLetterEnv is a kfake cluster holding n dead-letter records of tenant
// acme spread over 3 partitions (record i at time base+i seconds, in
// partition i%3), and a node (engine and Cluster) on it.
func deadLetterEnv(tb testing.TB, n int) *Cluster {
	tb.Helper()
	naming := partitioning.Naming{}
	k := gatewaytest.NewKafka(tb, testTenant, 3, kfake.SeedTopics(3, naming.DeadLetter(testTenant)))
	c, prod := k.Cluster, k.Prod
	base := time.Date(2026, 7, 9, 10, 0, 0, 0, time.UTC)
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: naming.DeadLetter(testTenant), Partition: int32(i % 3),
			Timestamp: base.Add(time.Duration(i) * time.Second), Value: fmt.Appendf(nil, `{"n":%d}`, i)})
	}
	if err := prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		tb.Fatal(err)
	}
	return newNode(tb, []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.FetchMaxWait(200 * time.Millisecond)}, nil)
}

// The newest n over all partitions, newest first; every record when fewer;
// none for a tenant without a dead-letter topic; out-of-range n refused.
func TestRecentDeadLetters(t *testing.T) {
	e := deadLetterEnv(t, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	values := func(n int) string {
		t.Helper()
		recs, truncated, err := e.RecentDeadLetters(ctx, testTenantT, n)
		if err != nil || truncated {
			t.Fatalf("n=%d: %v (truncated %v)", n, err, truncated)
		}
		var s string
		for _, r := range recs {
			s += string(r.Value)
		}
		return s
	}
	if got := values(4); got != `{"n":9}{"n":8}{"n":7}{"n":6}` {
		t.Errorf("newest 4: %s", got)
	}
	if got := values(100); got != `{"n":9}{"n":8}{"n":7}{"n":6}{"n":5}{"n":4}{"n":3}{"n":2}{"n":1}{"n":0}` {
		t.Errorf("all: %s", got)
	}
	if recs, _, err := e.RecentDeadLetters(ctx, tenant.MustParse("other"), 5); err != nil || len(recs) != 0 {
		t.Errorf("a tenant without dead letters: %v %v", recs, err)
	}
	for _, n := range []int{0, MaxRecentDeadLetters + 1} {
		if _, _, err := e.RecentDeadLetters(ctx, testTenantT, n); err == nil {
			t.Errorf("n=%d accepted", n)
		}
	}
}

// BenchmarkRecentDeadLetters is one GET /aep/dead-letters?limit=20 worth of
// Kafka work over a topic of 3000 dead letters (offsets, a short-lived
// client, three partition reads, merge); the baseline is State, the topic
// offsets lookup every subscription GET pays.
func BenchmarkRecentDeadLetters(b *testing.B) {
	e := deadLetterEnv(b, 3000)
	ctx := context.Background()
	b.Run("recent-20", func(b *testing.B) {
		for b.Loop() {
			if recs, _, err := e.RecentDeadLetters(ctx, testTenantT, 20); err != nil || len(recs) != 20 {
				b.Fatal(len(recs), err)
			}
		}
	})
	b.Run("state-baseline", func(b *testing.B) {
		for b.Loop() {
			if _, err := e.State(ctx, testTenantT); err != nil {
				b.Fatal(err)
			}
		}
	})
}
