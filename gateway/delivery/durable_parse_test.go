package delivery

import (
	"errors"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/filtering"
)

func TestCommitMetaRoundTrip(t *testing.T) {
	tag := cursor.TopicTag{1, 2, 3, 4, 5, 6, 7, 8}
	for _, pc := range []partCommit{
		{Partition: 0, Offset: 10, ReadEnd: 10},
		{Partition: 3, Offset: 10, ReadEnd: 25, Attempts: map[int64]int{10: 1, 17: 3, 24: 2}},
		{Partition: 1, Offset: 0, ReadEnd: 5, Attempts: map[int64]int{}},
	} {
		meta := commitMetaD(tag, 12, pc)
		gotTag, parts, got, ok := parseCommitMetaD(meta, pc.Offset)
		if !ok || gotTag != tag || parts != 12 || got.ReadEnd != pc.ReadEnd || len(got.Attempts) != len(pc.Attempts) {
			t.Fatalf("%q: %v %v %d %+v", meta, ok, gotTag, parts, got)
		}
		for o, n := range pc.Attempts {
			if got.Attempts[o] != n {
				t.Fatalf("%q: attempts %v, want %v", meta, got.Attempts, pc.Attempts)
			}
		}
	}
	// the cursor package's own format reads as "no read-ahead state"
	if _, parts, pc, ok := parseCommitMetaD("aep1:0102030405060708:12", 7); !ok || parts != 12 || pc.ReadEnd != 7 || pc.Attempts != nil {
		t.Fatalf("plain metadata: %v %d %+v", ok, parts, pc)
	}
}

func FuzzParseCommitMetaD(f *testing.F) {
	f.Add("aep1:0102030405060708:12:r=15:a=0.1,7.3,14.2", int64(10))
	f.Add("aep1:0102030405060708:12", int64(0))
	f.Add("", int64(5))
	f.Add("aep1:zz:1:r=1:a=", int64(1))
	f.Fuzz(func(t *testing.T, meta string, off int64) {
		if off < 0 {
			off = -off
		}
		_, _, pc, _ := parseCommitMetaD(meta, off)
		if pc.ReadEnd < pc.Offset || len(pc.Attempts) > MaxCommittedAttempts {
			t.Fatalf("%q: %+v", meta, pc)
		}
		for o, n := range pc.Attempts {
			if o < pc.Offset || o >= pc.ReadEnd || n <= 0 {
				t.Fatalf("%q: attempt entry %d=%d outside [%d,%d)", meta, o, n, pc.Offset, pc.ReadEnd)
			}
		}
	})
}

func FuzzParseCreateD(f *testing.F) {
	f.Add([]byte(`{"type":"subscription.requested","payload":{"types":["task.*"],"expires_at":"2999-01-01T00:00:00Z","ack_timeout_ms":1000,"max_attempts":5}}`))
	f.Add([]byte(`{"types":"task.*","delivery_mode":"replayable"}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"type":"subscription.requested","payload":null}`))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		fl, def, err := parseCreateD(body, now)
		if err != nil {
			var fe *filtering.Error
			if !errors.As(err, &fe) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		if fl == nil || def.DeliveryMode != ModeAtLeastOnce || (def.ExpiresAt != nil && !def.ExpiresAt.After(now)) {
			t.Fatalf("accepted %q as %+v", body, def)
		}
		if _, err := filtering.ParseD(def.Filter); err != nil {
			t.Fatalf("stored filter %s does not parse: %v", def.Filter, err)
		}
	})
}

func FuzzParseAcksD(f *testing.F) {
	f.Add([]byte(`[{"type":"event.acknowledged","payload":{"acknowledged_event_id":"evt_1"}},{"type":"event.rejected","payload":{"acknowledged_event_id":"evt_2","error":{"code":"x","message":"y"}}}]`))
	f.Add([]byte(`{"type":"event.acknowledged","payload":{}}`))
	f.Add([]byte(`[1,"a",null]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		items, res, err := parseAcksD(body)
		if err != nil {
			return
		}
		if len(items) != len(res) {
			t.Fatalf("%d items, %d results", len(items), len(res))
		}
		for i, it := range items {
			valid := it.Type != ""
			if valid == (res[i].Result == "invalid") || (valid && it.Payload.AcknowledgedEventID == "") {
				t.Fatalf("item %d: %+v result %+v", i, it, res[i])
			}
		}
	})
}
