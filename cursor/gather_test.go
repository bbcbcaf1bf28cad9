package cursor

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// indexRounds runs an indexer with gather over 20 single events produced
// 30 ms apart and returns how many index-writing rounds it made (its
// records on the index topic, less the session's one checkpoint) and how
// long the producing took.
func indexRounds(t *testing.T, gather time.Duration) (int, time.Duration) {
	t.Helper()
	_, opts := newCluster(t, map[string]int32{"aep.g.events": 1, "aep.g.index": 1})
	ix, err := NewIndexer(IndexerConfig{EventsTopic: "aep.g.events", IndexTopic: "aep.g.index", Group: "ix", ClientOpts: opts, Gather: gather})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	const n = 20
	t0 := time.Now()
	for i := range n {
		produce(t, opts, "aep.g.events", []event{{session: "s", seq: int64(i + 1)}})
		time.Sleep(30 * time.Millisecond)
	}
	took := time.Since(t0)
	waitFor(t, "the indexer", time.Minute, func() bool { x, _ := ix.Indexed(0); return x >= n })
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, opts...), kgo.ConsumeTopics("aep.g.index"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	recs := 0
	for ctx.Err() == nil {
		recs += cl.PollFetches(ctx).NumRecords()
	}
	return recs - 1, took
}

// At the tail, under single events, the indexer writes its markers and
// commits once per gathered poll, not once per event.
func TestIndexerGathersSingleEvents(t *testing.T) {
	const gather = 400 * time.Millisecond
	with, took := indexRounds(t, gather)
	without, _ := indexRounds(t, -1)
	t.Logf("index rounds for 20 events 30 ms apart (%v): %d with a 400 ms gather, %d without", took.Round(time.Millisecond), with, without)
	if most := int(took/gather) + 3; with < 1 || with > most {
		t.Errorf("%d rounds with a 400 ms gather over %v, want 1..%d", with, took, most)
	}
	if without <= with {
		t.Errorf("%d rounds without a gather, %d with: the gather saved nothing", without, with)
	}
}

// Close ends a gather in progress at once.
func TestIndexerCloseEndsAGather(t *testing.T) {
	_, opts := newCluster(t, map[string]int32{"aep.g.events": 1, "aep.g.index": 1})
	ix, err := NewIndexer(IndexerConfig{EventsTopic: "aep.g.events", IndexTopic: "aep.g.index", Group: "ix", ClientOpts: opts, Gather: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, opts, "aep.g.events", []event{{session: "s", seq: 1}})
	waitFor(t, "the indexer", time.Minute, func() bool { x, _ := ix.Indexed(0); return x >= 1 })
	done := make(chan error, 1)
	go func() { done <- ix.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close waited for the hour-long gather")
	}
}
