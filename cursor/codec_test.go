package cursor

import (
	"bytes"
	"encoding/base64"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

func testKeyring(t testing.TB, signID uint8, verify ...uint8) *Keyring {
	t.Helper()
	key := func(id uint8) Key { return Key{ID: id, Secret: bytes.Repeat([]byte{id + 1}, 32)} }
	var vs []Key
	for _, id := range verify {
		vs = append(vs, key(id))
	}
	kr, err := NewKeyring(key(signID), vs...)
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

func denseCursor(n int, base int64) Cursor {
	c := Cursor{Topic: TopicTag{1, 2, 3, 4, 5, 6, 7, 8}, Partitions: int32(n), Sequence: 123456}
	for p := 0; p < n; p++ {
		c.Offsets = append(c.Offsets, PartitionOffset{Partition: int32(p), Offset: base + int64(p*7919)})
	}
	return c
}

func TestCodecRoundTrip(t *testing.T) {
	kr := testKeyring(t, 1)
	cases := []struct {
		name string
		c    Cursor
	}{
		{"session-scoped", Cursor{Topic: TopicTag{9}, Partitions: 12, Sequence: 42, Offsets: []PartitionOffset{{7, 1_234_567}}}},
		{"empty frontier", Cursor{Partitions: 3}},
		{"zero offsets", Cursor{Partitions: 2, Offsets: []PartitionOffset{{0, 0}, {1, 0}}}},
		{"dense 1", denseCursor(1, 1_000_000)},
		{"dense 12", denseCursor(12, 1_000_000)},
		{"dense 64", denseCursor(64, 1_000_000)},
		{"sparse", Cursor{Partitions: 64, Sequence: 1 << 40, Offsets: []PartitionOffset{{0, 5}, {31, 1 << 40}, {63, 2}}}},
		{"decreasing offsets", Cursor{Partitions: 3, Offsets: []PartitionOffset{{0, 900}, {1, 3}, {2, 1 << 50}}}},
		{"max partitions", denseCursor(MaxPartitions, 0)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := kr.Encode("acme", tc.c)
			if err != nil {
				t.Fatal(err)
			}
			got, err := kr.Decode("acme", s)
			if err != nil {
				t.Fatal(err)
			}
			if got.Topic != tc.c.Topic || got.Partitions != tc.c.Partitions || got.Sequence != tc.c.Sequence ||
				!slices.Equal(got.Offsets, tc.c.Offsets) && !(len(got.Offsets) == 0 && len(tc.c.Offsets) == 0) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, tc.c)
			}
		})
	}
}

func TestCodecURLSafe(t *testing.T) {
	kr := testKeyring(t, 1)
	s, err := kr.Encode("acme", denseCursor(64, 1<<33))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_'
		if !ok {
			t.Fatalf("character %q in %s", r, s)
		}
	}
}

// TestCodecSize records the encoded size that docs/cursors.md quotes.
func TestCodecSize(t *testing.T) {
	kr := testKeyring(t, 1)
	for _, tc := range []struct {
		name string
		c    Cursor
		max  int
	}{
		{"1 partition named of 12", Cursor{Partitions: 12, Sequence: 100_000, Offsets: []PartitionOffset{{7, 50_000_000}}}, 64},
		{"12 partitions", denseCursor(12, 50_000_000), 110},
		{"64 partitions", denseCursor(64, 50_000_000), 330},
	} {
		s, err := kr.Encode("acme", tc.c)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d characters", tc.name, len(s))
		if len(s) > tc.max {
			t.Errorf("%s: %d characters, budget %d", tc.name, len(s), tc.max)
		}
	}
}

func TestCodecRejects(t *testing.T) {
	kr := testKeyring(t, 1, 2)
	good, err := kr.Encode("acme", denseCursor(4, 1000))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := b64.DecodeString(good)
	reenc := func(f func(b []byte) []byte) string {
		b := f(append([]byte(nil), raw...))
		return b64.EncodeToString(b)
	}
	other := testKeyring(t, 7)
	foreignKey, _ := other.Encode("acme", denseCursor(4, 1000))
	kr2 := testKeyring(t, 2, 1)
	rotated, _ := kr2.Encode("acme", denseCursor(4, 1000))
	if _, err := kr.Decode("acme", rotated); err != nil {
		t.Fatalf("cursor signed by a verifying key rejected: %v", err)
	}

	cases := []struct {
		name   string
		tenant string
		s      string
		want   error
	}{
		{"empty", "acme", "", ErrMalformed},
		{"not base64", "acme", "!!!", ErrMalformed},
		{"padded base64", "acme", base64.URLEncoding.EncodeToString(raw), ErrMalformed},
		{"other tenant", "globex", good, ErrForeignTenant},
		{"unknown version", "acme", reenc(func(b []byte) []byte { b[0] = 2; return b }), ErrVersion},
		{"version zero", "acme", reenc(func(b []byte) []byte { b[0] = 0; return b }), ErrVersion},
		{"unknown key", "acme", foreignKey, ErrUnknownKey},
		{"flipped offset bit", "acme", reenc(func(b []byte) []byte { b[len(b)-macLen-1] ^= 1; return b }), ErrForged},
		{"flipped mac bit", "acme", reenc(func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }), ErrForged},
		{"flipped topic", "acme", reenc(func(b []byte) []byte { b[2+2+tenantTagLen] ^= 1; return b }), ErrForged},
		{"unknown flag", "acme", reenc(func(b []byte) []byte { b[3] |= 0x80; return b }), ErrMalformed},
		{"trailing byte", "acme", reenc(func(b []byte) []byte { return append(b, 0) }), ErrMalformed},
		{"too long", "acme", string(make([]byte, MaxEncodedLen+1)), ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kr.Decode(tc.tenant, tc.s)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Code == "" {
				t.Fatalf("%v is not a coded *Error", err)
			}
		})
	}

	// Every proper prefix is told as truncated, whichever byte it stops at.
	for n := 1; n < len(raw); n++ {
		_, err := kr.Decode("acme", b64.EncodeToString(raw[:n]))
		if !errors.Is(err, ErrTruncated) {
			t.Fatalf("prefix of %d/%d bytes: got %v, want ErrTruncated", n, len(raw), err)
		}
	}
	// Every single-bit flip is rejected.
	for i := range raw {
		for bit := 0; bit < 8; bit++ {
			b := append([]byte(nil), raw...)
			b[i] ^= 1 << bit
			if _, err := kr.Decode("acme", b64.EncodeToString(b)); err == nil {
				t.Fatalf("flip of bit %d of byte %d accepted", bit, i)
			}
		}
	}
}

func TestKeyringConfig(t *testing.T) {
	if _, err := NewKeyring(Key{ID: 1, Secret: []byte("short")}); err == nil {
		t.Fatal("short secret accepted")
	}
	a := bytes.Repeat([]byte{1}, 32)
	b := bytes.Repeat([]byte{2}, 32)
	if _, err := NewKeyring(Key{ID: 1, Secret: a}, Key{ID: 1, Secret: b}); err == nil {
		t.Fatal("same id, different secrets accepted")
	}
	if _, err := NewKeyring(Key{ID: 1, Secret: a}, Key{ID: 1, Secret: a}); err != nil {
		t.Fatal(err)
	}
}

func TestEncodeRejectsInvalid(t *testing.T) {
	kr := testKeyring(t, 1)
	for _, c := range []Cursor{
		{Partitions: 0},
		{Partitions: MaxPartitions + 1},
		{Partitions: 2, Offsets: []PartitionOffset{{1, 0}, {0, 0}}},
		{Partitions: 2, Offsets: []PartitionOffset{{0, 0}, {0, 1}}},
		{Partitions: 2, Offsets: []PartitionOffset{{2, 0}}},
		{Partitions: 2, Offsets: []PartitionOffset{{0, -1}}},
	} {
		if _, err := kr.Encode("acme", c); err == nil {
			t.Errorf("Encode(%+v) succeeded", c)
		}
	}
}

func FuzzDecode(f *testing.F) {
	kr := testKeyring(f, 1)
	for _, c := range []Cursor{denseCursor(1, 5), denseCursor(12, 1<<30), {Partitions: 64, Offsets: []PartitionOffset{{3, 9}, {40, 1}}}} {
		s, _ := kr.Encode("acme", c)
		f.Add("acme", s)
	}
	f.Add("acme", "AQ")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, tenant, s string) {
		c, err := kr.Decode(tenant, s)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		// Whatever decodes was signed by us: it must re-encode to itself.
		again, err := kr.Encode(tenant, c)
		if err != nil {
			t.Fatalf("decoded cursor does not re-encode: %v", err)
		}
		if again != s {
			t.Fatalf("re-encoding differs:\n%s\n%s", s, again)
		}
	})
}

func FuzzRoundTrip(f *testing.F) {
	kr := testKeyring(f, 1)
	f.Add(uint64(1), uint16(12), uint64(7), int64(99))
	f.Fuzz(func(t *testing.T, seed uint64, parts uint16, seq uint64, base int64) {
		if parts == 0 || base < 0 || base > 1<<61 {
			return
		}
		r := rand.New(rand.NewPCG(seed, seed))
		c := Cursor{Partitions: int32(parts), Sequence: seq}
		for p := int32(0); p < int32(parts) && len(c.Offsets) < 300; p++ {
			if r.IntN(3) == 0 {
				c.Offsets = append(c.Offsets, PartitionOffset{p, base + r.Int64N(1<<40)})
			}
		}
		s, err := kr.Encode("t", c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := kr.Decode("t", s)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Offsets, c.Offsets) || got.Sequence != c.Sequence || got.Partitions != c.Partitions {
			t.Fatalf("got %+v want %+v", got, c)
		}
	})
}
