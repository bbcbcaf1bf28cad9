package dialectr_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/dialectr"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// resumeBenchPartitions is the tenant topic's partition count in newEnv.
const resumeBenchPartitions = 4

// sessionOn returns a session name with prefix whose record key lands on
// partition p (murmur2, as the gateway's producer partitions).
func sessionOn(prefix string, p int32, skip int) string {
	for i := 0; ; i++ {
		s := fmt.Sprintf("%s-%d", prefix, i)
		if partitioning.Partition([]byte(s), resumeBenchPartitions) == p {
			if skip == 0 {
				return s
			}
			skip--
		}
	}
}

// fillPartition writes total small dialect R events straight to partition p
// of the default tenant's topic, with the headers and key the gateway's
// ingest writes: every every-th record belongs to target (seq 0, 1, ...),
// the others to 64 filler sessions of the same partition. It returns the
// target's last seq.
func fillPartition(b *testing.B, seeds []string, p int32, target string, total, every int) int {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...),
		kgo.DefaultProduceTopic("aep.default.events"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(1<<20),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.MaxBufferedRecords(1<<17),
	)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	fillers := make([]string, 64)
	for i := range fillers {
		fillers[i] = sessionOn(fmt.Sprintf("fill%d", p), p, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const chunk = 1 << 15
	recs := make([]*kgo.Record, 0, chunk)
	seqs := map[string]int64{}
	lastTarget := -1
	for i := 0; i < total; i++ {
		s := fillers[i%len(fillers)]
		if i%every == every-1 {
			s = target
		}
		seq := seqs[s]
		seqs[s]++
		if s == target {
			lastTarget = int(seq)
		}
		id := fmt.Sprintf("p%d-%d", p, i)
		a := aep.Attrs{Dialect: aep.DialectR, ID: id, Type: "tool.requested", Source: "aep://b/" + s, Session: s,
			Agent: "bench", Epoch: 0, HasEpoch: true, Seq: seq, HasSeq: true}
		recs = append(recs, &kgo.Record{
			Key:       []byte(s),
			Partition: p,
			Value: fmt.Appendf(nil, `{"aep":"0.1","id":%q,"type":"tool.requested","time":"2026-07-03T10:14:00Z","source":"aep://b/%s","agent":"bench","session":%q,"seq":%d,"epoch":0}`,
				id, s, s, seq),
			Headers: partitioning.AppendHeaders(make([]kgo.RecordHeader, 0, 8), &a),
		})
		if len(recs) == chunk || i == total-1 {
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				b.Fatal(err)
			}
			recs = recs[:0]
		}
	}
	return lastTarget
}

// BenchmarkSSEResumePartitionSize: resume latency, from the reconnect to
// the first replayed `data:` line, for a session whose partition holds 10k
// events and for one whose partition holds 1M, in the same process and
// stack (checkpoint indexer at its defaults, caught up before timing). In
// both partitions the target session has one event in 100. Resume i asks
// for the session after its event last-1-(i mod resumePhases): the same
// positions in both partitions, spread over one checkpoint spacing, so the
// figure is not where the session's last checkpoint happens to fall (a
// fixed position measured the distance to it: ≈1,700 records in one
// partition, ≈3,600 in the other). ns/op is the whole reconnect (headers,
// stream-open, first event, close); first-data-ns/op is the
// request-to-first-data part of it.
func BenchmarkSSEResumePartitionSize(b *testing.B) {
	e := newEnv(b, func(c *dialectr.Config) { c.Index = cursor.IndexerConfig{} })
	e.post(rEvent("warmup", "warmup", 0, 0)) // creates the topics
	e.getSSE(nil, nil).Close()               // starts the tenant's indexer
	const every = 100
	cases := []struct {
		name  string
		p     int32
		total int
	}{
		{"partition=10k", 1, 10_000},
		{"partition=1M", 2, 1_000_000},
	}
	type target struct {
		session string
		last    int
	}
	targets := make([]target, len(cases))
	start := time.Now()
	for i, c := range cases {
		s := sessionOn("target", c.p, 0)
		targets[i] = target{s, fillPartition(b, e.seeds, c.p, s, c.total, every)}
	}
	produced := time.Since(start)
	ends, err := e.adm.ListEndOffsets(context.Background(), "aep.default.events")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range cases {
		end, _ := ends.Lookup("aep.default.events", c.p)
		if end.Offset < int64(c.total) {
			b.Fatalf("partition %d ends at %d, want at least %d events", c.p, end.Offset, c.total)
		}
		e.waitIndexed(c.p, end.Offset)
	}
	b.Logf("produced %d events in %v, indexed in %v", 1_010_000, produced, time.Since(start)-produced)
	if ok, _ := e.relay.IndexCaughtUp(context.Background(), gateway.DevTenant); !ok {
		b.Fatal("index not caught up")
	}
	// Alternate the two sizes, so that a machine whose load changes during
	// the run weighs on both (sub-benchmarks of later rounds are named
	// partition=10k#01, ...).
	for range resumeBenchRounds {
		for i, c := range cases {
			resumeRound(b, e, c.name, targets[i].session, targets[i].last)
		}
	}
}

// resumeBenchRounds is how many times each size is measured, alternately.
const resumeBenchRounds = 5

// resumePhases is how many of the session's last events the resumes cycle
// through: one checkpoint spacing (cursor.IndexerConfig's default Distance,
// 4096 offsets) at one target event in 100 offsets.
const resumePhases = 41

// resumeRound times, as the sub-benchmark name, resumes of session after
// one of its last resumePhases events (last is its last seq).
func resumeRound(b *testing.B, e *env, name, session string, last int) {
	b.Run(name, func(b *testing.B) {
		b.ReportAllocs()
		q := url.Values{"filter": {fmt.Sprintf(`{"session":[%q]}`, session)}}
		var first time.Duration
		i := 0
		for b.Loop() {
			after := last - 1 - i%resumePhases
			i++
			h := map[string]string{"Last-Event-ID": fmt.Sprintf("%s:0:%d", session, after)}
			want := fmt.Sprintf("%s:0:%d", session, after+1)
			t0 := time.Now()
			cl := e.getSSE(q, h)
			m := cl.nextEvent()
			first += time.Since(t0)
			if m.ID != want {
				b.Fatalf("got %+v, want %s", m, want)
			}
			cl.Close()
		}
		b.ReportMetric(float64(first.Nanoseconds())/float64(b.N), "first-data-ns/op")
	})
}
