package filtering

import (
	"fmt"
	"testing"
)

// BenchmarkUnsubscribeIdentical: n subscriptions with the same filter
// subscribed, then all unsubscribed (the timed part; ns/op is per n
// removals). "types" files them in one type-trie posting list, "session"
// in one exact-value list, "all" in the list checked for every event: a
// removal that copies its list makes this O(n²).
func BenchmarkUnsubscribeIdentical(b *testing.B) {
	filters := map[string]string{
		"types":   `{"types":"task.*"}`,
		"session": `{"types":"*","session_id":"sess_01"}`,
		"all":     `{"types":"*"}`,
	}
	for _, kind := range []string{"types", "session", "all"} {
		f := mustD(b, filters[kind])
		for _, n := range []int{1_000, 10_000} {
			b.Run(fmt.Sprintf("%s/n=%d", kind, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					x := NewIndex()
					for i := range n {
						x.Add(ID(i), f)
					}
					b.StartTimer()
					for i := range n {
						x.Remove(ID(i))
					}
				}
			})
		}
	}
}
