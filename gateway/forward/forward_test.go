package forward

import (
	"bytes"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestHeadersRoundTrip(t *testing.T) {
	src := []kgo.RecordHeader{{Key: "aep-type", Value: []byte("task.progress")}, {Key: "aep-session", Value: []byte("s1")}}
	to := Target{Node: "node-a", Incarnation: "01J", Partition: 3}
	hs := AppendHeaders(append([]kgo.RecordHeader(nil), src...), to, "aep.acme.events", 7, 1<<40, []byte("s1"), []uint64{1, 1 << 63}, false)
	var f Forwarded
	if err := Decode(&kgo.Record{Headers: hs}, &f); err != nil {
		t.Fatal(err)
	}
	if f.Node != "node-a" || f.Incarnation != "01J" || f.Topic != "aep.acme.events" || f.Partition != 7 || f.Offset != 1<<40 ||
		!bytes.Equal(f.Key, []byte("s1")) || f.Marker || f.NumSubs() != 2 || f.Sub(0) != 1 || f.Sub(1) != 1<<63 {
		t.Fatalf("decoded %+v", f)
	}
	if len(f.Headers) != len(src) || f.Headers[1].Key != "aep-session" {
		t.Fatalf("source headers %v, want %v", f.Headers, src)
	}
	m := AppendHeaders(nil, to, "aep.acme.events", 0, 5, nil, []uint64{9}, true)
	if err := Decode(&kgo.Record{Headers: m}, &f); err != nil || !f.Marker || f.Offset != 5 || f.Sub(0) != 9 || len(f.Headers) != 0 {
		t.Fatalf("marker %+v %v", f, err)
	}
}

func TestDecodeRefusesForeignRecords(t *testing.T) {
	var f Forwarded
	for _, hs := range [][]kgo.RecordHeader{
		nil,
		{{Key: "aep-type", Value: []byte("x")}},
		{{Key: HeaderNode, Value: []byte("n")}, {Key: HeaderSource, Value: []byte("t")}, {Key: HeaderPos, Value: []byte{1, 2}}},
		{{Key: HeaderNode, Value: []byte("n")}, {Key: HeaderSource, Value: []byte("t")}, {Key: HeaderPos, Value: make([]byte, 12)}, {Key: HeaderSubs, Value: []byte{1}}},
	} {
		if err := Decode(&kgo.Record{Headers: hs}, &f); !errors.Is(err, ErrMalformed) {
			t.Errorf("%v: %v, want ErrMalformed", hs, err)
		}
	}
}

// The node → partition map is Kafka's murmur2 (golden values, so that a
// change of hash is seen: it would move every node's partition).
func TestPartitionGolden(t *testing.T) {
	for node, want := range map[string]int32{"a": 0, "b": 0, "node-a": 3, "node-b": 2} {
		if got := Partition(node, 4); got != want {
			t.Errorf("Partition(%q, 4) = %d, want %d", node, got, want)
		}
	}
}
