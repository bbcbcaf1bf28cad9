package main

import (
	"math/bits"
	"time"
)

// histogram is a fixed-bucket, log-linear latency histogram in
// microseconds, in the manner of HdrHistogram: 64 linear sub-buckets per
// power of two, so a quantile is within 1/64 (1.6%) of the true value;
// values up to 2^40µs (12 days) are kept, larger ones clamp. Max is exact.
// Not safe for concurrent use: each worker owns one, merged after joining.
type histogram struct {
	counts [histBuckets]uint64
	n      uint64
	sum    time.Duration
	max    time.Duration
}

const (
	histSubBits = 6
	histSub     = 1 << histSubBits // sub-buckets per octave
	histOctaves = 40 - histSubBits
	histBuckets = (histOctaves + 1) * histSub
)

func histIndex(us uint64) int {
	if us < histSub {
		return int(us)
	}
	e := bits.Len64(us) - histSubBits - 1 // us>>e is in [histSub, 2·histSub)
	i := (e+1)*histSub + int(us>>e) - histSub
	return min(i, histBuckets-1)
}

// histUpper is the largest value (µs) that falls in bucket i.
func histUpper(i int) uint64 {
	if i < histSub {
		return uint64(i)
	}
	e := i/histSub - 1
	m := uint64(i%histSub + histSub)
	return (m+1)<<e - 1
}

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[histIndex(uint64(d/time.Microsecond))]++
	h.n++
	h.sum += d
	h.max = max(h.max, d)
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// quantile returns the upper bound of the bucket holding quantile q (0..1),
// never above the exact max; 0 when empty.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(time.Duration(histUpper(i))*time.Microsecond+time.Microsecond-1, h.max)
		}
	}
	return h.max
}

// LatencySummary is the request latency distribution of one phase.
type LatencySummary struct {
	Count              uint64
	Mean               time.Duration
	P50, P90, P99, Max time.Duration
}

func (h *histogram) summary() LatencySummary {
	s := LatencySummary{Count: h.n, Max: h.max, P50: h.quantile(0.50), P90: h.quantile(0.90), P99: h.quantile(0.99)}
	if h.n > 0 {
		s.Mean = h.sum / time.Duration(h.n)
	}
	return s
}
