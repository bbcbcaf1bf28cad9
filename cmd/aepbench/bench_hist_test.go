package main

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestHistIndexRoundTrip(t *testing.T) {
	prev := -1
	for _, us := range []uint64{0, 1, 63, 64, 65, 127, 128, 129, 1000, 4095, 4096, 1 << 20, 1<<40 - 1} {
		i := histIndex(us)
		if i < prev {
			t.Fatalf("index not monotonic at %d", us)
		}
		prev = i
		if up := histUpper(i); up < us || float64(up-us) > float64(us)/histSub+1 {
			t.Fatalf("value %d in bucket %d with upper bound %d", us, i, up)
		}
	}
	if histIndex(1<<62) != histBuckets-1 {
		t.Fatal("huge values do not clamp to the last bucket")
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	vals := rand.Perm(10000)
	for _, v := range vals {
		h.record(time.Duration(v+1) * time.Microsecond) // 1µs..10ms
	}
	s := h.summary()
	tests := []struct {
		got, want time.Duration
	}{
		{s.P50, 5 * time.Millisecond},
		{s.P90, 9 * time.Millisecond},
		{s.P99, 9900 * time.Microsecond},
	}
	for _, tc := range tests {
		if d := tc.got - tc.want; d < 0 || float64(d) > float64(tc.want)/histSub+float64(time.Microsecond) {
			t.Errorf("quantile %v, want %v within 1/64 above", tc.got, tc.want)
		}
	}
	if s.Max != 10*time.Millisecond || s.Count != 10000 {
		t.Fatalf("max %v count %d", s.Max, s.Count)
	}
	var merged histogram
	merged.merge(&h)
	merged.merge(&h)
	if merged.summary().P50 != s.P50 || merged.n != 20000 {
		t.Fatal("merge changed the distribution")
	}
	var empty histogram
	if empty.summary() != (LatencySummary{}) {
		t.Fatal("empty histogram has figures")
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	var h histogram
	b.ReportAllocs()
	d := time.Duration(0)
	for b.Loop() {
		d += 7919 * time.Nanosecond
		h.record(d % time.Second)
	}
}
