package cursor

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// resumeFixture is one kfake cluster, built once per benchmark process:
// partition small holds 10k events, partition big holds 1M, each with one
// tracked session making 1% of the partition among 200 others.
type resumeFixture struct {
	rv      *Resolver
	st      TopicState
	small   []event // tracked session of the 10k partition
	big     []event // tracked session of the 1M partition
	cleanup func()
}

var (
	fixtureOnce sync.Once
	fixture     *resumeFixture
)

func loadResumeFixture(b *testing.B) *resumeFixture {
	fixtureOnce.Do(func() {
		fixture = buildResumeFixture(b)
	})
	if fixture == nil {
		b.Fatal("fixture failed to build")
	}
	return fixture
}

func buildResumeFixture(b *testing.B) *resumeFixture {
	const parts = 2
	t0 := time.Now()
	// The cluster lives for the whole process: not tied to one b.Cleanup.
	c, opts := newClusterNoCleanup(b, map[string]int32{"bench.events": parts, "bench.index": 2})
	f := &resumeFixture{}
	var ends = map[int32]int64{}
	for p, n := range map[int32]int{0: 10_000, 1: 1_000_000} {
		sess := sameShard("tracked-", p, parts, 1)[0]
		others := sameShard("bg-", p, parts, 200)
		evs := sessionLog(sess, others, n/100, n-n/100, uint64(p)+3)
		produce(b, opts, "bench.events", evs)
		var mine []event
		for _, e := range evs {
			ends[e.part] = max(ends[e.part], e.offset+1)
			if e.session == sess && !e.noSeq {
				mine = append(mine, e)
			}
		}
		if p == 0 {
			f.small = mine
		} else {
			f.big = mine
		}
	}
	ix, err := NewIndexer(IndexerConfig{EventsTopic: "bench.events", IndexTopic: "bench.index", Group: "indexer", ClientOpts: opts})
	if err != nil {
		b.Fatal(err)
	}
	rv, err := NewResolver(ResolverConfig{EventsTopic: "bench.events", IndexTopic: "bench.index", ClientOpts: opts, FetchMaxBytes: 64 << 10})
	if err != nil {
		b.Fatal(err)
	}
	waitIndexed(b, ix, rv, ends)
	if err := ix.Close(); err != nil {
		b.Fatal(err)
	}
	f.rv = rv
	f.st, err = LoadTopicState(context.Background(), kadm.NewClient(rv.cl), "bench.events")
	if err != nil {
		b.Fatal(err)
	}
	_, cps, _ := rv.IndexStats()
	b.Logf("fixture: 10k + 1M events produced and indexed (%d checkpoints) in %v", cps, time.Since(t0))
	f.cleanup = func() { rv.Close(); c.Close() }
	return f
}

// replayFirst is the resume path up to the first replayed event: resolve
// the position, then read from the returned offset to the session's next
// event.
func (f *resumeFixture) replayFirst(ctx context.Context, b *testing.B, pos Position) (int, time.Duration) {
	t0 := time.Now()
	res, err := f.rv.Resolve(ctx, pos)
	if err != nil || res.Gap != nil {
		b.Fatalf("resolve %v: %+v %v", pos, res, err)
	}
	found := false
	n, err := f.rv.scan.scan(ctx, &f.st, res.Partition, res.Offset, f.st.End[res.Partition], func(r *kgo.Record) bool {
		_, match, ok := sessionEvent(r, pos.Session)
		found = match && ok
		return !found
	})
	if err != nil {
		b.Fatal(err)
	}
	d := time.Since(t0)
	if !found && res.Next != nil {
		b.Fatalf("resume %v: first replayed event not found", pos)
	}
	return res.Scanned + n, d
}

// BenchmarkResumeCost resumes random positions of a session in a partition
// holding 10k events and in one holding 1M, alternately, and reports the
// mean time to the first replayed event for each and their ratio.
func BenchmarkResumeCost(b *testing.B) {
	f := loadResumeFixture(b)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(9, 9))
	pick := func(evs []event) Position {
		e := evs[r.IntN(len(evs)-1)] // not the last: there is always a next event
		return Position{Session: evs[0].session, Epoch: e.epoch, Seq: e.seq}
	}
	var dSmall, dBig time.Duration
	var nSmall, nBig int
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n, d := f.replayFirst(ctx, b, pick(f.small))
		dSmall += d
		nSmall += n
		n, d = f.replayFirst(ctx, b, pick(f.big))
		dBig += d
		nBig += n
	}
	b.ReportMetric(float64(dSmall.Microseconds())/float64(b.N), "µs/resume-10k")
	b.ReportMetric(float64(dBig.Microseconds())/float64(b.N), "µs/resume-1M")
	b.ReportMetric(float64(nSmall)/float64(b.N), "records/resume-10k")
	b.ReportMetric(float64(nBig)/float64(b.N), "records/resume-1M")
	b.ReportMetric(float64(dBig)/float64(dSmall), "ratio-1M/10k")
}
