package gateway

import (
	"encoding/json"
	"fmt"
	"testing"
)

// The hand-written D ingest response is byte for byte what encoding/json
// writes for the same value.
func TestDIngestResponseJSONMatchesEncodingJSON(t *testing.T) {
	cases := map[string]dIngestResponse{
		"empty": {Errors: []dEventError{}, Positions: []dPosition{}},
		"nil":   {},
		"accepted": {Accepted: 2, Errors: []dEventError{}, Topic: "aep.acme.events", Positions: []dPosition{
			{EventIndex: 0, ID: "evt_01", Partition: 3, Offset: 1 << 40},
			{EventIndex: 1, ID: "evt_02", Partition: 0, Offset: 0, Reused: true},
		}},
		"escaped": {Accepted: 3, Errors: []dEventError{}, Topic: "t<&>", Positions: []dPosition{
			{ID: `a"b\c`}, {ID: "é\u2028\x01"}, {ID: "x\xffy"},
		}},
		"errors": {Accepted: 1, Rejected: 1, Topic: "t", Errors: []dEventError{
			{EventIndex: 0, Error: dErrorObj{Code: "invalid_envelope", Message: "bad <id>", Retryable: false}},
		}, Positions: []dPosition{{EventIndex: 1, ID: "evt_1", Partition: -1, Offset: -1}}},
	}
	for name, resp := range cases {
		if msg := sameAsEncodingJSON(&resp); msg != "" {
			t.Errorf("%s: %s", name, msg)
		}
	}
}

func BenchmarkDIngestResponseJSON(b *testing.B) {
	resp := dIngestResponse{Accepted: 100, Errors: []dEventError{}, Topic: "aep.default.events"}
	for i := range 100 {
		resp.Positions = append(resp.Positions, dPosition{EventIndex: i, ID: "evt_0123456789abcdef", Partition: int32(i % 12), Offset: int64(1_000_000 + i)})
	}
	b.Run("baseline-encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(&resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("appendJSON", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 8<<10)
		for b.Loop() {
			if _, err := resp.appendJSON(buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Any id and topic: the hand-written response equals encoding/json's.
func FuzzDIngestResponseJSON(f *testing.F) {
	f.Add("evt_01", "aep.default.events", int64(7), true)
	f.Add("a\"<&>\u2028\xff", "", int64(-1), false)
	f.Fuzz(func(t *testing.T, id, topic string, offset int64, reused bool) {
		resp := dIngestResponse{Accepted: 1, Errors: []dEventError{}, Topic: topic,
			Positions: []dPosition{{EventIndex: 3, ID: id, Partition: 2, Offset: offset, Reused: reused}}}
		if msg := sameAsEncodingJSON(&resp); msg != "" {
			t.Fatal(msg)
		}
	})
}

// sameAsEncodingJSON returns "" when v appends what encoding/json writes
// for it, else what differs.
func sameAsEncodingJSON(v jsonAppender) string {
	want, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	got, err := v.appendJSON(nil)
	if err != nil || string(got) != string(want) {
		return fmt.Sprintf("\n got %s (%v)\nwant %s", got, err, want)
	}
	return ""
}
