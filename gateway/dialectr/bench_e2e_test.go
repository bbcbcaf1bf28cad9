package dialectr_test

import (
	"fmt"
	"net/url"
	"testing"
)

// BenchmarkSSEResume: the cost of a resume over the whole stack (HTTP,
// resolver, catch-up, handover) next to opening a live stream, its baseline
// in the same run. The log holds 64 sessions × 64 events over 4 partitions;
// each resume asks for the last event of a session after its
// second-to-last position, so the replayed tail is one event and the cost
// shows what the index saves.
func BenchmarkSSEResume(b *testing.B) {
	e := newEnv(b, nil)
	e.getSSE(nil, nil).Close() // starts the tenant's indexer
	const sessions, per = 64, 64
	for s := range sessions {
		var batch []string
		for i := range per {
			batch = append(batch, rEvent(fmt.Sprintf("b-%d-%d", s, i), fmt.Sprintf("sess-%d", s), 0, i))
		}
		e.post(batch...)
	}
	last := e.record(fmt.Sprintf("b-%d-%d", sessions-1, per-1))
	e.waitIndexed(last.Partition, last.Offset+1)
	b.Run("baseline-live-open", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e.getSSE(nil, nil).Close()
		}
	})
	b.Run("resume-tail-1", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			s := i % sessions
			i++
			c := e.getSSE(url.Values{"filter": {fmt.Sprintf(`{"session":["sess-%d"]}`, s)}}, map[string]string{"Last-Event-ID": fmt.Sprintf("sess-%d:0:%d", s, per-2)})
			if m := c.nextEvent(); m.ID != fmt.Sprintf("sess-%d:0:%d", s, per-1) {
				b.Fatalf("got %+v", m)
			}
			c.Close()
		}
	})
}
