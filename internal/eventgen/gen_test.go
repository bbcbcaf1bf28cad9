package eventgen

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/aep-gateway/aep-gateway/aep"
)

func TestGenEventsValidate(t *testing.T) {
	tests := []struct {
		d        aep.Dialect
		sessions int
		size     int
	}{
		{aep.DialectR, 1, 0},
		{aep.DialectR, 7, 0},
		{aep.DialectR, 3, 2048},
		{aep.DialectD, 1, 0},
		{aep.DialectD, 5, 1000},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/sessions=%d/size=%d", tc.d, tc.sessions, tc.size), func(t *testing.T) {
			const n = 300
			var out bytes.Buffer
			g := NewGenerator(GenOptions{Dialect: tc.d, Sessions: tc.sessions, Size: tc.size})
			if err := WriteEvents(context.Background(), &out, g, n); err != nil {
				t.Fatal(err)
			}
			ids := map[string]bool{}
			nextSeq := map[string]int64{}
			sc := bufio.NewScanner(&out)
			sc.Buffer(nil, 1<<20)
			lines := 0
			for sc.Scan() {
				lines++
				line := sc.Bytes()
				a, err := aep.Parse(line, aep.Limits{})
				if err != nil {
					t.Fatalf("line %d does not validate: %v\n%s", lines, err, line)
				}
				if a.Dialect != tc.d {
					t.Fatalf("line %d: dialect %s, want %s", lines, a.Dialect, tc.d)
				}
				if _, err := ulid.ParseStrict(a.ID); err != nil {
					t.Fatalf("line %d: id %q is not a ULID: %v", lines, a.ID, err)
				}
				if ids[a.ID] {
					t.Fatalf("line %d: id %s repeated", lines, a.ID)
				}
				ids[a.ID] = true
				if tc.size > 0 && len(line) != tc.size {
					t.Fatalf("line %d: %d bytes, want %d", lines, len(line), tc.size)
				}
				if tc.d == aep.DialectR {
					if !a.HasSeq || a.Seq != nextSeq[a.Session] || !a.HasEpoch || a.Epoch != 0 {
						t.Fatalf("line %d: session %s seq %d (has %v) epoch %d, want seq %d epoch 0", lines, a.Session, a.Seq, a.HasSeq, a.Epoch, nextSeq[a.Session])
					}
					nextSeq[a.Session]++
				} else {
					nextSeq[a.Session]++
				}
			}
			if lines != n {
				t.Fatalf("%d lines, want %d", lines, n)
			}
			if len(nextSeq) != tc.sessions {
				t.Fatalf("%d sessions, want %d", len(nextSeq), tc.sessions)
			}
		})
	}
}

// TestGenAttrsAreTheParsers holds Generator.Attrs to what the gateway's
// parser reads from the same event, so the routed baseline's records carry
// exactly the gateway's headers.
func TestGenAttrsAreTheParsers(t *testing.T) {
	for _, d := range []aep.Dialect{aep.DialectR, aep.DialectD} {
		for _, size := range []int{0, 600} {
			g := NewGenerator(GenOptions{Dialect: d, Sessions: 3, Size: size})
			var buf []byte
			for i := range 20 {
				buf, _ = g.Next(buf[:0])
				want, err := aep.Parse(buf, aep.Limits{})
				if err != nil {
					t.Fatalf("%s event %d: %v", d, i, err)
				}
				if got := g.Attrs(); !reflect.DeepEqual(got, want) {
					t.Fatalf("%s event %d: Attrs\n%+v\nparser\n%+v", d, i, got, want)
				}
			}
		}
	}
}

func TestGenSameSeedSameBytes(t *testing.T) {
	start := time.Date(2026, 7, 3, 10, 0, 0, 0, time.UTC)
	gen := func(seed uint64) []byte {
		var b bytes.Buffer
		if err := WriteEvents(context.Background(), &b, NewGenerator(GenOptions{Seed: seed, Start: start}), 50); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	if !bytes.Equal(gen(7), gen(7)) {
		t.Fatal("same seed and start gave different events")
	}
	if bytes.Equal(gen(7), gen(8)) {
		t.Fatal("different seeds gave the same events")
	}
}

func BenchmarkGeneratorNext(b *testing.B) {
	for _, d := range []aep.Dialect{aep.DialectR, aep.DialectD} {
		b.Run(d.String(), func(b *testing.B) {
			g := NewGenerator(GenOptions{Dialect: d, Sessions: 100})
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				buf, _ = g.Next(buf[:0])
			}
		})
	}
}
