package filtering

import (
	"fmt"
	"testing"

	"github.com/aep-gateway/aep-gateway/aep"
)

func BenchmarkFilterMatch(b *testing.B) {
	cases := []struct {
		name string
		f    *Filter
		a    *aep.Attrs
	}{
		{"simple/D-exact-type", mustD(b, `{"types":"task.progress"}`),
			&aep.Attrs{Dialect: aep.DialectD, Type: "task.progress", Source: "a"}},
		{"simple/D-session", mustD(b, `{"types":"*","session_id":"sess_01"}`),
			&aep.Attrs{Dialect: aep.DialectD, Type: "task.progress", Session: "sess_01"}},
		{"simple/R-type-prefix", mustR(b, `{"type":"attention.*"}`),
			&aep.Attrs{Dialect: aep.DialectR, Type: "attention.requested"}},
		{"compound/D-seed-example", mustD(b, `{"types":["memory.*","context.*"],"source":["memory:main"],
			"target":"agent:researcher","topic":"tasks.task_01","session_id":"sess_01","conversation_id":"conv_01",
			"task_id":"task_01","from_cursor":"stream_01:42","delivery_mode":"at_least_once"}`),
			&aep.Attrs{Dialect: aep.DialectD, Type: "memory.fact.added", Source: "memory:main",
				Target: "agent:researcher", Topic: "tasks.task_01", Session: "sess_01", Conversation: "conv_01", Task: "task_01"}},
		{"compound/D-inner-wildcards", mustD(b, `{"types":["memory.*","tool.*.progress","*.*.done"],"source":["a","b","c"]}`),
			&aep.Attrs{Dialect: aep.DialectD, Type: "tool.call.progress", Source: "c"}},
		{"compound/R-conjunction", mustR(b, `{"type":["attention.*","error.*"],"severity":{"gte":"notice"},
			"agent":["claude-code","codex"],"epoch":0,"acmeregion":"eu-1"}`),
			&aep.Attrs{Dialect: aep.DialectR, Type: "error.raised", Severity: "error", Agent: "codex",
				Ext: []aep.Ext{{Name: "acmeteam", Value: []byte(`7`)}, {Name: "acmeregion", Value: []byte(`"eu-1"`)}}}},
	}
	for _, c := range cases {
		if !c.f.Match(c.a) {
			b.Fatalf("%s: no match", c.name)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !c.f.Match(c.a) {
					b.Fatal("no match")
				}
			}
		})
	}
}

const benchSubs = 100_000

// benchPopulation is 100k subscriptions of the shapes a node carries: D SSE
// sessions, D agents watching progress by source, R sessions with a
// severity floor, R vendor type prefixes, D exact types, and a handful of
// broad ones. The two events below each match at most 10 of them.
func benchPopulation(b *testing.B) []*Filter {
	fs := make([]*Filter, 0, benchSubs)
	for i := 0; len(fs) < benchSubs; i++ {
		var f *Filter
		switch i % 10 {
		case 0, 1, 2, 3:
			f = mustD(b, fmt.Sprintf(`{"types":"*","session_id":"sess-%d"}`, i))
		case 4, 5:
			f = mustD(b, fmt.Sprintf(`{"types":["tool.*.progress","memory.*"],"source":"agent-%d"}`, i))
		case 6, 7:
			f = mustR(b, fmt.Sprintf(`{"session":"s-%d","severity":{"gte":"notice"}}`, i))
		case 8:
			f = mustR(b, fmt.Sprintf(`{"type":"x.v%d.*"}`, i))
		case 9:
			f = mustD(b, fmt.Sprintf(`{"types":"task%d.progress"}`, i))
		}
		fs = append(fs, f)
	}
	// Broad subscriptions every event is checked against.
	fs[10] = mustD(b, `{"types":"tool.*"}`)
	fs[11] = mustD(b, `{"types":"*.call.*"}`)
	fs[12] = mustR(b, `{"severity":{"gte":"error"}}`)
	fs[13] = mustR(b, `{}`)
	return fs
}

var (
	benchEventD = &aep.Attrs{Dialect: aep.DialectD, Type: "tool.call.progress", Source: "agent-14", Session: "sess-20"}
	benchEventR = &aep.Attrs{Dialect: aep.DialectR, Type: "x.v18.tool.done", Session: "s-16", Severity: "error"}
)

func BenchmarkRoute100k(b *testing.B) {
	fs := benchPopulation(b)
	x := NewIndex()
	for i, f := range fs {
		x.Add(ID(i), f)
	}
	for _, ev := range []struct {
		name string
		a    *aep.Attrs
	}{{"D", benchEventD}, {"R", benchEventR}} {
		dst := x.Match(ev.a, nil)
		var brute []ID
		for i, f := range fs {
			if f.Match(ev.a) {
				brute = append(brute, ID(i))
			}
		}
		if len(dst) != len(brute) || len(dst) == 0 || len(dst) > 10 {
			b.Fatalf("event %s: index %v, brute force %v", ev.name, dst, brute)
		}
		b.Run("index/"+ev.name, func(b *testing.B) {
			b.ReportAllocs()
			dst := make([]ID, 0, 16)
			for b.Loop() {
				dst = x.Match(ev.a, dst[:0])
			}
			b.ReportMetric(float64(len(dst)), "matches")
		})
		b.Run("bruteforce/"+ev.name, func(b *testing.B) {
			b.ReportAllocs()
			dst := make([]ID, 0, 16)
			for b.Loop() {
				dst = dst[:0]
				for i, f := range fs {
					if f.Match(ev.a) {
						dst = append(dst, ID(i))
					}
				}
			}
			b.ReportMetric(float64(len(dst)), "matches")
		})
	}
	// Matching while another goroutine subscribes and unsubscribes in a
	// loop: readers never wait for the writer.
	b.Run("index-under-churn/D", func(b *testing.B) {
		b.ReportAllocs()
		stop := make(chan struct{})
		done := make(chan struct{})
		churn := mustD(b, `{"types":"*","session_id":"sess-churn"}`)
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				x.Add(benchSubs+2, churn)
				x.Remove(benchSubs + 2)
			}
		}()
		b.RunParallel(func(pb *testing.PB) {
			dst := make([]ID, 0, 16)
			for pb.Next() {
				dst = x.Match(benchEventD, dst[:0])
			}
		})
		close(stop)
		<-done
	})
	b.Run("subscribe+unsubscribe", func(b *testing.B) {
		b.ReportAllocs()
		f := mustD(b, `{"types":"*","session_id":"sess-new"}`)
		for b.Loop() {
			x.Add(benchSubs+1, f)
			x.Remove(benchSubs + 1)
		}
	})
	b.Run("subscribe+unsubscribe/type-pattern", func(b *testing.B) {
		b.ReportAllocs()
		f := mustR(b, `{"type":"x.vnew.*"}`)
		for b.Loop() {
			x.Add(benchSubs+1, f)
			x.Remove(benchSubs + 1)
		}
	})
}

// BenchmarkBuild100k is the cost of filing 100k subscriptions one by one
// into an empty index (ns/op is per 100k).
func BenchmarkBuild100k(b *testing.B) {
	fs := benchPopulation(b)
	b.ReportAllocs()
	for b.Loop() {
		x := NewIndex()
		for i, f := range fs {
			x.Add(ID(i), f)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	d := []byte(`{"types":["memory.*","tool.*.progress"],"source":"memory:main","session_id":"sess_01","delivery_mode":"at_least_once"}`)
	r := []byte(`{"type":["attention.*","error.*"],"severity":{"gte":"notice"},"agent":["claude-code","codex"]}`)
	b.Run("D", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParseD(d); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("R", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParseR(r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
