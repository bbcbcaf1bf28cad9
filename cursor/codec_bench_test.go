package cursor

import "testing"

// BenchmarkEncode is the per-event cost of a D delivery.cursor.
func BenchmarkEncode(b *testing.B) {
	kr := testKeyring(b, 1)
	c := Cursor{Partitions: 12, Sequence: 100_000, Offsets: []PartitionOffset{{7, 50_000_000}}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		c.Sequence++
		if _, err := kr.Encode("acme", c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	kr := testKeyring(b, 1)
	s, _ := kr.Encode("acme", denseCursor(12, 50_000_000))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := kr.Decode("acme", s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncoder is BenchmarkEncode's cursor through a per-stream Encoder:
// append (what an SSE message needs) and a string (what a WebSocket
// subscription keeps as its last cursor).
func BenchmarkEncoder(b *testing.B) {
	kr := testKeyring(b, 1)
	c := Cursor{Partitions: 12, Sequence: 100_000, Offsets: []PartitionOffset{{7, 50_000_000}}}
	e := kr.NewEncoder("acme")
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 128)
		for i := 0; i < b.N; i++ {
			c.Sequence++
			var err error
			if buf, err = e.Append(buf[:0], &c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("string", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			c.Sequence++
			if _, err := e.Encode(&c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
