package cursor

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestEncoderMatchesEncode: an Encoder writes exactly Keyring.Encode's text,
// whatever the cursor's size (the length varint grows from 1 to 3 bytes
// across these) and whatever it appended before.
func TestEncoderMatchesEncode(t *testing.T) {
	kr := testKeyring(t, 3, 1)
	tenants := []string{"acme", "", strings.Repeat("long-tenant-", 20)}
	cursors := []Cursor{
		{Topic: TopicTag{9}, Partitions: 12, Sequence: 42, Offsets: []PartitionOffset{{7, 1_234_567}}},
		{Partitions: 3},
		denseCursor(1, 0),
		denseCursor(12, 1_000_000),
		denseCursor(200, 1<<40),
		denseCursor(MaxPartitions, 0),
		{Partitions: 64, Sequence: 1 << 40, Offsets: []PartitionOffset{{0, 5}, {31, 1 << 40}, {63, 2}}},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		c := Cursor{Partitions: int32(1 + r.IntN(300)), Sequence: r.Uint64()}
		for p := range c.Partitions {
			if r.IntN(2) == 0 {
				c.Offsets = append(c.Offsets, PartitionOffset{p, r.Int64N(1 << 50)})
			}
		}
		cursors = append(cursors, c)
	}
	for _, tenant := range tenants {
		e := kr.NewEncoder(tenant)
		for i, c := range cursors {
			want, err := kr.Encode(tenant, c)
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.Encode(&c)
			if err != nil || got != want {
				t.Fatalf("tenant %q cursor %d: Encoder gave %.40q (%v), Encode %.40q", tenant, i, got, err, want)
			}
			out, err := e.Append([]byte("id: "), &c)
			if err != nil || string(out) != "id: "+want {
				t.Fatalf("tenant %q cursor %d: Append gave %.40q (%v)", tenant, i, out, err)
			}
			if back, err := kr.Decode(tenant, got); err != nil || back.Sequence != c.Sequence || len(back.Offsets) != len(c.Offsets) {
				t.Fatalf("tenant %q cursor %d: decode: %v", tenant, i, err)
			}
		}
	}
}

func TestEncoderRejectsInvalid(t *testing.T) {
	e := testKeyring(t, 1).NewEncoder("acme")
	for _, c := range []Cursor{
		{Partitions: 0},
		{Partitions: 2, Offsets: []PartitionOffset{{1, 0}, {0, 0}}},
		{Partitions: 2, Offsets: []PartitionOffset{{0, -1}}},
	} {
		if out, err := e.Append([]byte("x"), &c); err == nil || string(out) != "x" {
			t.Errorf("Append(%+v) = %q, %v; want an error and dst unchanged", c, out, err)
		}
	}
}

// TestEncoderAllocs: the per-message path allocates nothing once warm.
func TestEncoderAllocs(t *testing.T) {
	e := testKeyring(t, 1).NewEncoder("acme")
	c := denseCursor(12, 50_000_000)
	buf := make([]byte, 0, 256)
	allocs := testing.AllocsPerRun(100, func() {
		c.Sequence++
		buf, _ = e.Append(buf[:0], &c)
	})
	if allocs != 0 {
		t.Fatalf("Append allocates %v times per cursor", allocs)
	}
}
