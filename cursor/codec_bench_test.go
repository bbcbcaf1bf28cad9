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
