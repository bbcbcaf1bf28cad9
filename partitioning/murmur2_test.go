package partitioning

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Golden vectors from Kafka's UtilsTest.testMurmur2 (the Java client's own
// test): placement must never drift from what a Java producer computes.
func TestMurmur2KafkaVectors(t *testing.T) {
	cases := []struct {
		in   string
		want int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
	}
	for _, c := range cases {
		if got := int32(Murmur2([]byte(c.in))); got != c.want {
			t.Errorf("Murmur2(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

// Placement of known session keys, pinned: changing these breaks every
// existing topic's session order.
func TestPartitionGolden(t *testing.T) {
	pinned := []struct {
		key  string
		n    int32
		want int32
	}{
		// toPositive(murmur2) % n computed from the Kafka vectors above:
		// -973932308 & 0x7fffffff = 1173551340; -790332482 & 0x7fffffff = 1357151166.
		{"21", 12, 1173551340 % 12},
		{"21", 3, 1173551340 % 3},
		{"foobar", 12, 1357151166 % 12},
		{"foobar", 64, 1357151166 % 64},
		{"abc", 7, 479470107 % 7},
	}
	for _, c := range pinned {
		if got := Partition([]byte(c.key), c.n); got != c.want {
			t.Errorf("Partition(%q, %d) = %d, want %d", c.key, c.n, got, c.want)
		}
	}
	if got := Partition([]byte("x"), 0); got != -1 {
		t.Errorf("Partition with no partitions = %d, want -1", got)
	}
}

// franz-go's StickyKeyPartitioner (what the gateway's producer uses) must
// agree with Partition for every key.
func TestPartitionAgreesWithFranzGo(t *testing.T) {
	p := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for i := 0; i < 5000; i++ {
		key := []byte(fmt.Sprintf("sess_%d_%x", i, i*7919))
		for _, n := range []int{1, 3, 12, 64, 100} {
			want := p.Partition(&kgo.Record{Key: key}, n)
			if got := Partition(key, int32(n)); int(got) != want {
				t.Fatalf("key %q n=%d: Partition=%d franz-go=%d", key, n, got, want)
			}
		}
	}
}

func BenchmarkPartition(b *testing.B) {
	key := []byte("sess_01JZ0000000000000000000000")
	b.ReportAllocs()
	for b.Loop() {
		_ = Partition(key, 12)
	}
}
