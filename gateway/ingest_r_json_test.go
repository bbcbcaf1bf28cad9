package gateway

import "testing"

// The hand-written R ingest response is byte for byte what encoding/json
// writes for the same value.
func TestRAcceptedJSONMatchesEncodingJSON(t *testing.T) {
	cases := map[string]rAccepted{
		"nil":   {},
		"empty": {Topic: "aep.acme.events", Positions: []rPosition{}},
		"accepted": {Accepted: 2, Topic: "aep.acme.events", Positions: []rPosition{
			{Index: 0, Line: 1, Partition: 3, Offset: 1 << 40},
			{Index: 1, Line: 3, Partition: 0, Offset: 0, Reused: true},
		}},
		"escaped topic": {Accepted: 1, Topic: "t<&>\"é\xff", Positions: []rPosition{{Partition: -1, Offset: -1}}},
		"diagnostics": {Accepted: 1, Topic: "aep.acme.events", Positions: []rPosition{{Partition: 1, Offset: 2}},
			Diagnostics: []string{`event 0: CloudEvents attribute "aep_bad" dropped`, "<\u2028>"}},
	}
	for name, resp := range cases {
		if msg := sameAsEncodingJSON(&resp); msg != "" {
			t.Errorf("%s: %s", name, msg)
		}
	}
}

// Any topic and position: the hand-written response equals encoding/json's.
func FuzzRAcceptedJSON(f *testing.F) {
	f.Add("aep.default.events", 3, int32(2), int64(7), true)
	f.Add("a\"<&>\u2028\xff", -1, int32(-1), int64(-1), false)
	f.Fuzz(func(t *testing.T, topic string, index int, partition int32, offset int64, reused bool) {
		resp := rAccepted{Accepted: 1, Topic: topic,
			Positions: []rPosition{{Index: index, Line: index + 1, Partition: partition, Offset: offset, Reused: reused}}}
		if msg := sameAsEncodingJSON(&resp); msg != "" {
			t.Fatal(msg)
		}
	})
}
