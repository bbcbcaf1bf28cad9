package engine

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/cursor"
)

func TestParseSince(t *testing.T) {
	for in, want := range map[string]time.Duration{"90s": 90 * time.Second, "15m": 15 * time.Minute, "24h": MaxSince} {
		if got, err := ParseSince(in); err != nil || got != want {
			t.Errorf("ParseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0s", "-1m", "25h", "15", "1y", "15m;drop"} {
		if _, err := ParseSince(in); err != ErrBadSince {
			t.Errorf("ParseSince(%q) = %v; want ErrBadSince", in, err)
		}
	}
}

// TestOffsetsAfter: per partition, the first record at or after the time,
// the end offset where none is that recent, and an empty partition's 0.
func TestOffsetsAfter(t *testing.T) {
	k := newKafkaEnv(t, 3)
	now := time.Now()
	put := func(p int32, at time.Time) {
		r := &kgo.Record{Topic: k.topic, Partition: p, Key: []byte("s"), Value: []byte(`{}`), Timestamp: at}
		if err := k.prod.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	put(0, now.Add(-2*time.Hour))
	put(0, now.Add(-time.Minute))
	put(0, now)
	put(1, now.Add(-2*time.Hour))
	e := k.engine(nil)
	got, err := e.OffsetsAfter(context.Background(), testTenantT, now.Add(-10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := []cursor.PartitionOffset{{Partition: 0, Offset: 1}, {Partition: 1, Offset: 1}, {Partition: 2, Offset: 0}}
	if len(got) != len(want) {
		t.Fatalf("got %v; want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v; want %v", got, want)
		}
	}
}
