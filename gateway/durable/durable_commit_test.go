package durable

import (
	"testing"

	"github.com/aep-gateway/aep-gateway/cursor"
)

func TestCommitMetaRoundTrip(t *testing.T) {
	tag := cursor.TopicTag{1, 2, 3, 4, 5, 6, 7, 8}
	for _, pc := range []partCommit{
		{Partition: 0, Offset: 10, ReadEnd: 10},
		{Partition: 3, Offset: 10, ReadEnd: 25, Attempts: map[int64]int{10: 1, 17: 3, 24: 2}},
		{Partition: 1, Offset: 0, ReadEnd: 5, Attempts: map[int64]int{}, Journal: -1},
		{Partition: 2, Offset: 7, ReadEnd: 9, Attempts: map[int64]int{7: 0, 8: 2}, Journal: 0, Holder: 1},
		{Partition: 2, Offset: 7, ReadEnd: 7, Journal: 123456, Holder: 99},
	} {
		meta := commitMeta(tag, 12, pc)
		gotTag, parts, got, ok := parseCommitMeta(meta, pc.Offset)
		if !ok || gotTag != tag || parts != 12 || got.ReadEnd != pc.ReadEnd || len(got.Attempts) != len(pc.Attempts) ||
			got.Journal != pc.Journal || got.Holder != pc.Holder {
			t.Fatalf("%q: %v %v %d %+v", meta, ok, gotTag, parts, got)
		}
		for o, n := range pc.Attempts {
			if got.Attempts[o] != n {
				t.Fatalf("%q: attempts %v, want %v", meta, got.Attempts, pc.Attempts)
			}
		}
	}
	// the cursor package's own format reads as "no read-ahead state"
	if _, parts, pc, ok := parseCommitMeta("aep1:0102030405060708:12", 7); !ok || parts != 12 || pc.ReadEnd != 7 || pc.Attempts != nil {
		t.Fatalf("plain metadata: %v %d %+v", ok, parts, pc)
	}
}

func FuzzParseCommitMeta(f *testing.F) {
	f.Add("aep1:0102030405060708:12:r=15:a=0.1,7.3,14.2", int64(10))
	f.Add("aep1:0102030405060708:12", int64(0))
	f.Add("", int64(5))
	f.Add("aep1:zz:1:r=1:a=", int64(1))
	f.Fuzz(func(t *testing.T, meta string, off int64) {
		if off < 0 {
			off = -off
		}
		_, _, pc, _ := parseCommitMeta(meta, off)
		if pc.ReadEnd < pc.Offset || len(pc.Attempts) > MaxCommittedAttempts {
			t.Fatalf("%q: %+v", meta, pc)
		}
		for o, n := range pc.Attempts {
			if o < pc.Offset || o >= pc.ReadEnd || n < 0 {
				t.Fatalf("%q: attempt entry %d=%d outside [%d,%d)", meta, o, n, pc.Offset, pc.ReadEnd)
			}
		}
	})
}
