package cursor

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// naiveAcks is the model: a map of every read offset to its state.
type naiveAcks struct {
	start int64
	next  int64
	state map[int64]bool // offset -> done; only read offsets are present
}

// committable scans from the last answer (the answer never decreases) and
// forgets settled offsets below it, which keeps the model small.
func (n *naiveAcks) committable() int64 {
	o := n.start
	for o < n.next {
		done, read := n.state[o]
		if read && !done {
			break
		}
		delete(n.state, o)
		o++
	}
	n.start = o
	return o
}

func (n *naiveAcks) pending() int {
	c := 0
	for _, done := range n.state {
		if !done {
			c++
		}
	}
	return c
}

func TestAckTrackerTable(t *testing.T) {
	tr := NewAckTracker(64)
	if err := tr.Assign(3, 100); err != nil {
		t.Fatal(err)
	}
	step := func(name string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	step("d100", tr.Delivered(3, 100))
	step("f101", tr.Filtered(3, 101))
	step("d103", tr.Delivered(3, 103)) // 102 skipped by the log
	if c, _ := tr.Committable(3); c != 100 {
		t.Fatalf("committable %d, want 100", c)
	}
	if r := tr.Ack(3, 103); r != AckApplied {
		t.Fatalf("ack 103: %v", r)
	}
	if c, _ := tr.Committable(3); c != 100 {
		t.Fatalf("committable %d after out-of-order ack, want 100", c)
	}
	for _, tc := range []struct {
		p    int32
		off  int64
		want AckResult
	}{
		{3, 103, AckDuplicate},
		{3, 101, AckDuplicate}, // filtered
		{3, 102, AckDuplicate}, // skipped by the log
		{3, 104, AckUnknown},   // never read
		{7, 100, AckUnknown},   // foreign partition
		{-1, 100, AckUnknown},
		{3, 100, AckApplied},
		{3, 100, AckStale},
		{3, 50, AckStale},
	} {
		if got := tr.Ack(tc.p, tc.off); got != tc.want {
			t.Fatalf("Ack(%d, %d) = %v, want %v", tc.p, tc.off, got, tc.want)
		}
	}
	if c, _ := tr.Committable(3); c != 104 {
		t.Fatalf("committable %d, want 104", c)
	}
	if err := tr.Delivered(3, 103); !errors.Is(err, ErrOffsetBehind) {
		t.Fatalf("re-read: %v", err)
	}
	if err := tr.Delivered(9, 1); !errors.Is(err, ErrNotTracked) {
		t.Fatalf("untracked: %v", err)
	}
	// Fill the window: 64 offsets from the committable one.
	for o := int64(104); o < 168; o++ {
		step("fill", tr.Delivered(3, o))
	}
	if tr.Room(3) != 0 {
		t.Fatalf("room %d, want 0", tr.Room(3))
	}
	if err := tr.Delivered(3, 168); !errors.Is(err, ErrWindowFull) {
		t.Fatalf("over window: %v", err)
	}
	if err := tr.Filtered(3, 168); !errors.Is(err, ErrWindowFull) {
		t.Fatalf("filtered over window: %v", err)
	}
	tr.Ack(3, 104)
	if tr.Room(3) != 1 {
		t.Fatalf("room %d after one ack, want 1", tr.Room(3))
	}
	// A large skip with nothing outstanding needs no room.
	for o := int64(105); o < 168; o++ {
		tr.Ack(3, o)
	}
	step("jump", tr.Filtered(3, 1_000_000))
	step("jump2", tr.Delivered(3, 5_000_000))
	if c, _ := tr.Committable(3); c != 5_000_000 {
		t.Fatalf("committable %d, want 5000000", c)
	}
	if f := tr.Frontier(); len(f) != 1 || f[0] != (PartitionOffset{3, 5_000_000}) {
		t.Fatalf("frontier %v", f)
	}
	tr.Revoke(3)
	if r := tr.Ack(3, 5_000_000); r != AckUnknown {
		t.Fatalf("ack after revoke: %v", r)
	}
}

// TestAckTrackerModel drives the tracker and the naive model with the same
// random operations: reads with gaps, filtered reads, acks out of order,
// duplicates, acks of unknown offsets and of other partitions.
func TestAckTrackerModel(t *testing.T) {
	t.Parallel()
	seeds := 200
	if testing.Short() {
		seeds = 20
	}
	for seed := 0; seed < seeds; seed++ {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		window := 64 << r.IntN(3)
		tr := NewAckTracker(window)
		models := map[int32]*naiveAcks{}
		for p := int32(0); p < 3; p++ {
			start := r.Int64N(1000)
			if err := tr.Assign(p, start); err != nil {
				t.Fatal(err)
			}
			models[p] = &naiveAcks{start: start, next: start, state: map[int64]bool{}}
		}
		var delivered []PartitionOffset
		for op := 0; op < 5000; op++ {
			p := int32(r.IntN(4)) // partition 3 is foreign
			m := models[p]
			switch k := r.IntN(10); {
			case k < 4 && m != nil: // read
				off := m.next + int64(r.IntN(3)) // sometimes skip offsets
				if r.IntN(50) == 0 {
					off += int64(r.IntN(500)) // a long skip
				}
				pending := r.IntN(3) != 0
				var err error
				if pending {
					err = tr.Delivered(p, off)
				} else {
					err = tr.Filtered(p, off)
				}
				fits := off-m.committable() < int64(tr.Window()) || m.committable() == m.next
				if fits != (err == nil) {
					t.Fatalf("seed %d op %d: read %d/%d: err %v, model fits %v (committable %d)", seed, op, p, off, err, fits, m.committable())
				}
				if err != nil {
					if !errors.Is(err, ErrWindowFull) {
						t.Fatalf("seed %d: %v", seed, err)
					}
					continue
				}
				m.state[off] = !pending
				m.next = off + 1
				if pending {
					delivered = append(delivered, PartitionOffset{p, off})
				}
			case k < 8 && len(delivered) > 0: // ack a delivered offset, maybe again
				i := r.IntN(len(delivered))
				po := delivered[i]
				if r.IntN(4) != 0 {
					delivered[i] = delivered[len(delivered)-1]
					delivered = delivered[:len(delivered)-1]
				}
				checkAck(t, tr, models, po)
			default: // ack anything: unknown, foreign, stale
				po := PartitionOffset{p, r.Int64N(3000) - 10}
				checkAck(t, tr, models, po)
			}
			for q, mm := range models {
				got, _ := tr.Committable(q)
				if want := mm.committable(); got != want {
					t.Fatalf("seed %d op %d: partition %d committable %d, model %d", seed, op, q, got, want)
				}
				if got, want := tr.Pending(q), mm.pending(); got != want {
					t.Fatalf("seed %d op %d: partition %d pending %d, model %d", seed, op, q, got, want)
				}
				if room := tr.Room(q); room != mm.committable()+int64(tr.Window())-mm.next {
					t.Fatalf("seed %d op %d: room %d", seed, op, room)
				}
			}
		}
	}
}

func checkAck(t *testing.T, tr *AckTracker, models map[int32]*naiveAcks, po PartitionOffset) {
	t.Helper()
	m := models[po.Partition]
	want := AckUnknown
	if m != nil {
		done, read := m.state[po.Offset]
		switch {
		case po.Offset < m.committable():
			want = AckStale
		case !read:
			want = AckUnknown
			if po.Offset < m.next {
				want = AckDuplicate // skipped by the log: done
			}
		case done:
			want = AckDuplicate
		default:
			want = AckApplied
			m.state[po.Offset] = true
		}
	}
	if got := tr.Ack(po.Partition, po.Offset); got != want {
		t.Fatalf("Ack(%d, %d) = %v, model %v", po.Partition, po.Offset, got, want)
	}
}
