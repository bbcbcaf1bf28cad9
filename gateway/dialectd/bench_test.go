package dialectd

import (
	"testing"
)

var benchEvent = []byte(`{"aep_version":"0.1","id":"evt_01JZ0000000000000000000000","type":"task.progress","source":"agent:researcher","target":"tool:crawler","task_id":"task_01","session_id":"sess_01","created_at":"2026-07-09T10:00:00Z","payload":{"progress":0.5,"message":"crawling page 3 of 10"}}`)

// BenchmarkAppendData: building one SSE data line, against the baseline of
// copying the stored bytes alone.
func BenchmarkAppendData(b *testing.B) {
	cur := "ASUBARlvDdqrZW44AhRNOwMKAAwDgKNHUoiEzrW71YssDT2A4g"
	b.Run("baseline-copy", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 1024)
		for b.Loop() {
			buf = append(buf[:0], benchEvent...)
		}
	})
	b.Run("with-delivery", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 1024)
		for b.Loop() {
			buf, _ = appendData(buf[:0], benchEvent, ModeReplayable, 12345, cur)
		}
	})
	// An event relayed from an upstream hop carries a delivery member,
	// which is found by the member scan and replaced.
	relayed := append(append([]byte(nil), benchEvent[:len(benchEvent)-1]...), `,"delivery":{"mode":"replayable","sequence":9,"cursor":"up"}}`...)
	b.Run("replace-delivery", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 1024)
		for b.Loop() {
			buf, _ = appendData(buf[:0], relayed, ModeReplayable, 12345, cur)
		}
	})
}
