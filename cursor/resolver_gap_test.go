package cursor

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestResolveTailAndRetention covers the stretch the indexer has not
// reached (indexer stopped, events produced after) and retention: a
// position whose successor was deleted is a Gap, never a silent restart.
func TestResolveTailAndRetention(t *testing.T) {
	t.Parallel()
	const parts = 2
	// Full size (AEP_TEST_LONG=1): a 300-event session among 3300 records,
	// then 100 more among 1100 with the indexer down. Otherwise half of it:
	// still 6 distances indexed and an unindexed stretch of 2 distances.
	n1, o1, n2, o2 := 150, 1500, 50, 500
	if longTests() {
		n1, o1, n2, o2 = 300, 3000, 100, 1000
	}
	_, opts := newCluster(t, map[string]int32{"aep.t.events": parts, "aep.t.index": 1})
	ctx := context.Background()
	session := "s_tail"
	p := partitionOf(session, parts)
	others := sameShard("o-", p, parts, 5)
	first := sessionLog(session, others, n1, o1, 5)
	produce(t, opts, "aep.t.events", first)
	ends := map[int32]int64{}
	for _, e := range first {
		ends[e.part] = max(ends[e.part], e.offset+1)
	}
	ix, err := NewIndexer(IndexerConfig{EventsTopic: "aep.t.events", IndexTopic: "aep.t.index", Group: "ix", ClientOpts: opts, Distance: 256})
	if err != nil {
		t.Fatal(err)
	}
	rv, err := NewResolver(ResolverConfig{EventsTopic: "aep.t.events", IndexTopic: "aep.t.index", ClientOpts: opts})
	if err != nil {
		t.Fatal(err)
	}
	defer rv.Close()
	waitIndexed(t, ix, rv, ends)
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	// Continue the session where it stopped, with the indexer down.
	last := first[len(first)-1]
	for i := len(first) - 1; i >= 0; i-- {
		if first[i].session == session && !first[i].noSeq {
			last = first[i]
			break
		}
	}
	second := sessionLog(session, others, n2, o2, 6)
	for i := range second {
		if second[i].session == session {
			second[i].epoch += last.epoch + 1 // the emitter restarted: a new epoch
		}
	}
	produce(t, opts, "aep.t.events", second)
	all := append(append([]event{}, first...), second...)
	var mine []event
	for _, e := range all {
		if e.session == session && !e.noSeq {
			mine = append(mine, e)
		}
	}
	for i, e := range mine {
		res, err := rv.Resolve(ctx, Position{Session: session, Epoch: e.epoch, Seq: e.seq})
		if err != nil || res.Gap != nil || res.Offset != e.offset+1 {
			t.Fatalf("position %d (%d,%d): %+v %v, want offset %d", i, e.epoch, e.seq, res, err, e.offset+1)
		}
		if i+1 < len(mine) && (res.Next == nil || res.NextOffset != mine[i+1].offset) {
			t.Fatalf("position %d: next %+v@%d, want @%d", i, res.Next, res.NextOffset, mine[i+1].offset)
		}
	}

	// A new indexer instance in the same group picks up where the first
	// stopped, with no memory of the sessions: resolves stay exact and the
	// scans are bounded again.
	for _, e := range second {
		ends[e.part] = max(ends[e.part], e.offset+1)
	}
	ix2, err := NewIndexer(IndexerConfig{EventsTopic: "aep.t.events", IndexTopic: "aep.t.index", Group: "ix", ClientOpts: opts, Distance: 256})
	if err != nil {
		t.Fatal(err)
	}
	waitIndexed(t, ix2, rv, ends)
	if err := ix2.Close(); err != nil {
		t.Fatal(err)
	}
	for i, e := range mine {
		res, err := rv.Resolve(ctx, Position{Session: session, Epoch: e.epoch, Seq: e.seq})
		if err != nil || res.Gap != nil || res.Offset != e.offset+1 {
			t.Fatalf("after re-indexing, position %d: %+v %v, want offset %d", i, res, err, e.offset+1)
		}
		if res.Scanned > 256 {
			t.Fatalf("after re-indexing, position %d scanned %d records, bound 256", i, res.Scanned)
		}
	}

	// Retention: delete the partition below the middle of the session.
	cut := mine[len(mine)/2].offset
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var del kadm.Offsets
	del.AddOffset("aep.t.events", p, cut, -1)
	if _, err := kadm.NewClient(cl).DeleteRecords(ctx, del); err != nil {
		t.Fatal(err)
	}
	early := mine[len(mine)/4]
	res, err := rv.Resolve(ctx, Position{Session: session, Epoch: early.epoch, Seq: early.seq})
	if err != nil {
		t.Fatal(err)
	}
	if res.Gap == nil || res.Gap.Reason != GapRetention || res.Gap.RestartAt != cut || res.Offset != cut {
		t.Fatalf("resolve below the log start: %+v gap %+v, want a retention gap restarting at %d", res, res.Gap, cut)
	}
	if res.Gap.Earliest == nil || (res.Gap.Earliest.Epoch != mine[len(mine)/2].epoch || res.Gap.Earliest.Seq != mine[len(mine)/2].seq) {
		t.Fatalf("earliest %+v, want (%d,%d)", *res.Gap.Earliest, mine[len(mine)/2].epoch, mine[len(mine)/2].seq)
	}
	// The position just before the cut: its own event and the stretch after
	// it are deleted, so whether the session had more events there cannot be
	// known: that is told as a (possible) retention gap restarting at the cut.
	atCut := mine[len(mine)/2-1]
	res, err = rv.Resolve(ctx, Position{Session: session, Epoch: atCut.epoch, Seq: atCut.seq})
	if err != nil || res.Gap == nil || res.Gap.Reason != GapRetention || res.Offset != cut || res.NextOffset != cut {
		t.Fatalf("position before the cut: %+v gap %+v %v, want a gap restarting at %d", res, res.Gap, err, cut)
	}
	// The first held position: its event is still in the log, no gap.
	held := mine[len(mine)/2]
	res, err = rv.Resolve(ctx, Position{Session: session, Epoch: held.epoch, Seq: held.seq})
	if err != nil || res.Gap != nil || res.Offset != held.offset+1 {
		t.Fatalf("first held position: %+v gap %+v %v, want offset %d", res, res.Gap, err, held.offset+1)
	}
	// After the cut nothing changes.
	late := mine[3*len(mine)/4]
	res, err = rv.Resolve(ctx, Position{Session: session, Epoch: late.epoch, Seq: late.seq})
	if err != nil || res.Gap != nil || res.Offset != late.offset+1 {
		t.Fatalf("position after the cut: %+v %v", res, err)
	}
}
