package cursor

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestCheckTable(t *testing.T) {
	id := TopicID{1, 2, 3, 4, 5, 6, 7, 8, 9}
	st := TopicState{Topic: "t", ID: id, Partitions: 3, Start: []int64{10, 0, 0}, End: []int64{100, 50, 7}}
	tag := id.Tag()
	cases := []struct {
		name  string
		c     Cursor
		start []PartitionOffset
		gaps  []Gap
	}{
		{"exact", Cursor{Topic: tag, Partitions: 3, Offsets: []PartitionOffset{{0, 10}, {1, 50}, {2, 3}}},
			[]PartitionOffset{{0, 10}, {1, 50}, {2, 3}}, nil},
		{"retention", Cursor{Topic: tag, Partitions: 3, Offsets: []PartitionOffset{{0, 4}}},
			[]PartitionOffset{{0, 10}}, []Gap{{Partition: 0, Requested: 4, RestartAt: 10, Reason: GapRetention}}},
		{"truncated", Cursor{Topic: tag, Partitions: 3, Offsets: []PartitionOffset{{2, 9}}},
			[]PartitionOffset{{2, 7}}, []Gap{{Partition: 2, Requested: 9, RestartAt: 7, Reason: GapTruncated}}},
		{"recreated", Cursor{Topic: TopicTag{9}, Partitions: 3, Offsets: []PartitionOffset{{1, 20}}},
			[]PartitionOffset{{1, 0}}, []Gap{{Partition: 1, Requested: 20, RestartAt: 0, Reason: GapTopicRecreated}}},
		{"grown whole-topic", Cursor{Topic: tag, Partitions: 2, Offsets: []PartitionOffset{{0, 10}, {1, 5}}},
			[]PartitionOffset{{0, 10}, {1, 5}, {2, 0}}, []Gap{
				{Partition: 0, Requested: 10, RestartAt: 10, Reason: GapPartitionsChanged},
				{Partition: 1, Requested: 5, RestartAt: 5, Reason: GapPartitionsChanged},
				{Partition: 2, Requested: -1, RestartAt: 0, Reason: GapPartitionsChanged}}},
		{"named partition gone", Cursor{Topic: tag, Partitions: 8, Offsets: []PartitionOffset{{5, 1}}},
			nil, []Gap{{Partition: 5, Requested: 1, RestartAt: -1, Reason: GapPartitionsChanged}}},
		{"no topic id known", Cursor{Partitions: 3, Offsets: []PartitionOffset{{1, 3}}},
			[]PartitionOffset{{1, 3}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start, gaps := st.Check(tc.c)
			if !equalPO(start, tc.start) {
				t.Errorf("start %v, want %v", start, tc.start)
			}
			if len(gaps) != len(tc.gaps) {
				t.Fatalf("gaps %v, want %v", gaps, tc.gaps)
			}
			for i := range gaps {
				if gaps[i] != tc.gaps[i] {
					t.Errorf("gap %d: %v, want %v", i, gaps[i], tc.gaps[i])
				}
			}
		})
	}
}

func equalPO(a, b []PartitionOffset) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCommitterAndGapsOnKafka commits a tracker's frontier through a
// consumer group, reads it back, then makes the log lose it three ways.
func TestCommitterAndGapsOnKafka(t *testing.T) {
	t.Parallel()
	_, opts := newCluster(t, map[string]int32{"aep.acme.events": 3})
	ctx := context.Background()
	// The recreated topic is seen once the client refreshes its metadata,
	// which it does at most every MetadataMinAge (default 5 s).
	cl, err := kgo.NewClient(append(opts, kgo.MetadataMinAge(50*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var evs []event
	for i := 0; i < 300; i++ {
		evs = append(evs, event{session: "s" + itoa(i%7), seq: int64(i)})
	}
	produce(t, opts, "aep.acme.events", evs)
	st, err := LoadTopicState(ctx, adm, "aep.acme.events")
	if err != nil {
		t.Fatal(err)
	}
	if st.ID.IsZero() {
		t.Fatal("kfake gave no topic ID")
	}

	tr := NewAckTracker(0)
	for p := int32(0); p < 3; p++ {
		_ = tr.Assign(p, 0)
	}
	for _, e := range evs {
		if err := tr.Delivered(e.part, e.offset); err != nil {
			t.Fatal(err)
		}
		if e.seq%5 != 0 { // every fifth event is left unacknowledged
			tr.Ack(e.part, e.offset)
		}
	}
	frontier := Cursor{Topic: st.ID.Tag(), Partitions: st.Partitions, Offsets: tr.Frontier()}
	cm := NewCommitter(adm, "aep.acme.sub.orders")
	if _, found, err := cm.Fetch(ctx, "aep.acme.events"); err != nil || found {
		t.Fatalf("fetch before commit: found %v, %v", found, err)
	}
	if err := cm.Commit(ctx, "aep.acme.events", frontier); err != nil {
		t.Fatal(err)
	}
	got, found, err := cm.Fetch(ctx, "aep.acme.events")
	if err != nil || !found {
		t.Fatalf("fetch: %v %v", found, err)
	}
	if got.Topic != frontier.Topic || got.Partitions != 3 || !equalPO(got.Offsets, frontier.Offsets) {
		t.Fatalf("read back %+v, committed %+v", got, frontier)
	}
	// Readable by any Kafka tool: the plain group offsets agree.
	raw, err := adm.FetchOffsets(ctx, "aep.acme.sub.orders")
	if err != nil {
		t.Fatal(err)
	}
	for _, po := range frontier.Offsets {
		o, ok := raw.Lookup("aep.acme.events", po.Partition)
		if !ok || o.At != po.Offset {
			t.Fatalf("group offset %d: %+v, want %d", po.Partition, o, po.Offset)
		}
	}
	if _, gaps := st.Check(got); len(gaps) != 0 {
		t.Fatalf("fresh frontier has gaps: %v", gaps)
	}

	// Retention: delete records below the high watermark of partition 0.
	end0 := st.End[0]
	var del kadm.Offsets
	del.AddOffset("aep.acme.events", 0, end0, -1)
	if _, err := adm.DeleteRecords(ctx, del); err != nil {
		t.Fatal(err)
	}
	st2, err := LoadTopicState(ctx, adm, "aep.acme.events")
	if err != nil {
		t.Fatal(err)
	}
	_, gaps := st2.Check(got)
	if len(gaps) != 1 || gaps[0].Reason != GapRetention || gaps[0].Partition != 0 || gaps[0].RestartAt != end0 {
		t.Fatalf("after deleting records: gaps %v", gaps)
	}

	// Recreated topic: same name, new ID.
	if _, err := adm.DeleteTopics(ctx, "aep.acme.events"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, "aep.acme.events"); err != nil {
		t.Fatal(err)
	}
	var st3 TopicState
	waitFor(t, "recreated topic", 10e9, func() bool {
		st3, err = LoadTopicState(ctx, adm, "aep.acme.events")
		return err == nil && st3.ID != st.ID
	})
	start, gaps := st3.Check(got)
	if len(gaps) != 3 || gaps[0].Reason != GapTopicRecreated || len(start) != 3 || start[0].Offset != 0 {
		t.Fatalf("after recreation: start %v gaps %v", start, gaps)
	}

	// More partitions.
	if _, err := adm.CreatePartitions(ctx, 2, "aep.acme.events"); err != nil {
		t.Fatal(err)
	}
	var st4 TopicState
	waitFor(t, "grown topic", 10e9, func() bool {
		st4, err = LoadTopicState(ctx, adm, "aep.acme.events")
		return err == nil && st4.Partitions == 5
	})
	cur := Cursor{Topic: st3.ID.Tag(), Partitions: 3, Offsets: []PartitionOffset{{0, 0}, {1, 0}, {2, 0}}}
	start, gaps = st4.Check(cur)
	if len(start) != 5 || len(gaps) != 5 || gaps[4].Reason != GapPartitionsChanged || gaps[4].Requested != -1 {
		t.Fatalf("after growth: start %v gaps %v", start, gaps)
	}
}
