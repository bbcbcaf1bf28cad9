package cursor

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// sessionLog builds n events of one session interleaved at random with
// others events of other sessions of the same partition. The session's
// positions have gaps, epoch bumps (a new counter from 0) and a few
// unpositioned events.
func sessionLog(session string, others []string, n, nOthers int, seed uint64) []event {
	r := rand.New(rand.NewPCG(seed, 1))
	evs := make([]event, 0, n+nOthers)
	otherSeq := make([]int64, len(others))
	epoch, seq, mine := int64(0), int64(0), 0
	for mine < n || len(evs)-mine < nOthers {
		if mine < n && (len(evs)-mine >= nOthers || r.IntN(n+nOthers) < n) {
			switch {
			case r.IntN(1000) == 0:
				epoch, seq = epoch+1, 0 // emitter restart: new counter
			case r.IntN(10) == 0:
				seq += int64(2 + r.IntN(5)) // gap
			default:
				seq++
			}
			evs = append(evs, event{session: session, epoch: epoch, seq: seq, noSeq: r.IntN(200) == 0})
			mine++
			continue
		}
		i := r.IntN(len(others))
		otherSeq[i]++
		evs = append(evs, event{session: others[i], seq: otherSeq[i]})
	}
	return evs
}

// hasEveryCase reports whether the session's events in evs hold a gap in
// seq, an epoch bump and an event without a position.
func hasEveryCase(evs []event, session string) bool {
	var gap, bump, unpositioned bool
	var prev *event
	for i := range evs {
		e := &evs[i]
		switch {
		case e.session != session:
			continue
		case e.noSeq:
			unpositioned = true
			continue
		case prev != nil && e.epoch != prev.epoch:
			bump = true
		case prev != nil && e.seq > prev.seq+1:
			gap = true
		}
		prev = e
	}
	return gap && bump && unpositioned
}

func TestResolveEveryPosition(t *testing.T) {
	t.Parallel()
	const parts = 4
	// Full size (AEP_TEST_LONG=1): 10k positions among 110k records, some
	// 215 checkpoint distances. Otherwise a tenth of it: still 21
	// distances, every kind of gap and epoch bump, ~80 s less under -race.
	n, nOthers := 1_000, 10_000
	if longTests() && !testing.Short() {
		n, nOthers = 10_000, 100_000
	}
	const distance = 512
	_, opts := newCluster(t, map[string]int32{"aep.acme.events": parts, "aep.acme.index": 2})
	session := "s_resume"
	p := partitionOf(session, parts)
	others := sameShard("other-", p, parts, 50)
	// The first seed whose log holds every case the resolver handles (seed 1
	// at full size).
	var evs []event
	for seed := uint64(1); ; seed++ {
		if evs = sessionLog(session, others, n, nOthers, seed); hasEveryCase(evs, session) {
			break
		}
	}
	// Noise in the other partitions too.
	noise := []event{}
	for i := 0; i < 2000; i++ {
		noise = append(noise, event{session: "noise-" + itoa(i%97), seq: int64(i)})
	}
	produce(t, opts, "aep.acme.events", evs)
	produce(t, opts, "aep.acme.events", noise)
	ends := map[int32]int64{}
	for _, e := range append(evs, noise...) {
		ends[e.part] = max(ends[e.part], e.offset+1)
	}
	t0 := time.Now()
	_, rv := startIndex(t, opts, "aep.acme.events", "aep.acme.index", distance, ends)
	t.Logf("indexed in %v", time.Since(t0))
	t0 = time.Now()
	defer func() { t.Logf("resolved in %v", time.Since(t0)) }()

	var mine []event
	for _, e := range evs {
		if e.part != p {
			t.Fatalf("event of %s in partition %d, want %d", e.session, e.part, p)
		}
		if e.session == session && !e.noSeq {
			mine = append(mine, e)
		}
	}
	ctx := context.Background()
	var (
		mu      sync.Mutex
		maxScan int
	)
	check := func(pos Position, wantOffset int64, next *event) {
		res, err := rv.Resolve(ctx, pos)
		if err != nil {
			t.Errorf("resolve %v: %v", pos, err)
			return
		}
		if res.Gap != nil {
			t.Errorf("resolve %v: unexpected %v", pos, *res.Gap)
		}
		if res.Partition != p || res.Offset != wantOffset {
			t.Errorf("resolve %v: %d@%d, want %d@%d", pos, res.Partition, res.Offset, p, wantOffset)
		}
		switch {
		case next == nil && res.Next != nil:
			t.Errorf("resolve %v: next %v, want none", pos, *res.Next)
		case next != nil && (res.Next == nil || res.NextOffset != next.offset ||
			res.Next.Epoch != next.epoch || res.Next.Seq != next.seq):
			t.Errorf("resolve %v: next %+v@%d, want (%d,%d)@%d", pos, res.Next, res.NextOffset, next.epoch, next.seq, next.offset)
		}
		mu.Lock()
		maxScan = max(maxScan, res.Scanned)
		mu.Unlock()
	}
	// Strictly after each position: the tail starts right after its event,
	// and its first event is the next position.
	// Four resolvers at once: the Resolver is shared by connections.
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Go(func() {
			for i := w; i < len(mine); i += 4 {
				e := mine[i]
				var next *event
				if i+1 < len(mine) {
					next = &mine[i+1]
				}
				check(Position{Session: session, Epoch: e.epoch, Seq: e.seq}, e.offset+1, next)
				// A position inside a gap resolves like the position before it.
				if next != nil && next.epoch == e.epoch && next.seq > e.seq+1 {
					check(Position{Session: session, Epoch: e.epoch, Seq: e.seq + 1}, e.offset+1, next)
				}
			}
		})
	}
	wg.Wait()
	// Before the first event: the whole session.
	check(Position{Session: session, Epoch: 0, Seq: 0}, mine[0].offset, &mine[0])
	// A session never seen: nothing yet, start at the end.
	res, err := rv.Resolve(ctx, Position{Session: "s_unknown", Seq: 3})
	if err != nil || res.Gap != nil || res.Next != nil {
		t.Fatalf("unknown session: %+v, %v", res, err)
	}
	// The bound: one checkpoint distance, whatever the history.
	if maxScan > distance {
		t.Fatalf("a resume scanned %d records, bound %d", maxScan, distance)
	}
	t.Logf("%d positions of a session in %d records: at most %d records scanned per resume", len(mine), len(evs), maxScan)
}
