package cursor

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"
)

// BenchmarkAckTrackerOutOfOrder keeps inflight events pending on one
// partition and, per delivered event, acknowledges a random one among the
// oldest 64 pending, so acks arrive out of order while the committable
// offset keeps moving; one in ten reads is filtered out and one in twenty
// acks is repeated.
func BenchmarkAckTrackerOutOfOrder(b *testing.B) {
	for _, inflight := range []int{1 << 10, 1 << 13} {
		b.Run("inflight="+itoa(inflight), func(b *testing.B) {
			window := inflight * 4
			tr := NewAckTracker(window)
			_ = tr.Assign(0, 0)
			r := rand.New(rand.NewPCG(1, 2))
			pending := make([]int64, 0, 4*inflight)
			head := 0
			next := int64(0)
			read := func() {
				for {
					o := next
					next++
					if r.IntN(10) == 0 {
						if err := tr.Filtered(0, o); err != nil {
							b.Fatal(err)
						}
						continue
					}
					if err := tr.Delivered(0, o); err != nil {
						b.Fatal(err)
					}
					pending = append(pending, o)
					return
				}
			}
			for len(pending) < inflight {
				read()
			}
			const spread = 64
			var ms0, ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				j := head + r.IntN(min(spread, len(pending)-head))
				o := pending[j]
				if tr.Ack(0, o) != AckApplied {
					b.Fatal("ack not applied")
				}
				if i%20 == 0 {
					tr.Ack(0, o) // duplicate
				}
				pending[j] = pending[head]
				head++
				if head == len(pending) || len(pending) == cap(pending) {
					pending = append(pending[:0], pending[head:]...)
					head = 0
				}
				read()
			}
			b.StopTimer()
			runtime.ReadMemStats(&ms1)
			w := tr.parts[0]
			bytes := int(unsafe.Sizeof(*w)) + len(w.words)*8
			b.ReportMetric(float64(bytes)/float64(tr.Pending(0)), "B/pending")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acks/s")
			if c, _ := tr.Committable(0); c > next {
				b.Fatal("committable beyond reads")
			}
		})
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	for n > 0 {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	return string(buf[i:])
}
