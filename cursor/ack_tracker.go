package cursor

import (
	"errors"
	"fmt"
	"math/bits"
)

// AckResult says what an acknowledgement did. Only AckApplied changes
// state; the others are normal under at-least-once delivery and are worth
// counting, not failing on.
type AckResult uint8

const (
	AckApplied   AckResult = iota // a pending offset became done
	AckDuplicate                  // already acknowledged or filtered out
	AckStale                      // below the committable offset: long done
	AckUnknown                    // never delivered, or a partition not tracked
)

func (r AckResult) String() string {
	switch r {
	case AckApplied:
		return "applied"
	case AckDuplicate:
		return "duplicate"
	case AckStale:
		return "stale"
	}
	return "unknown"
}

var (
	// ErrWindowFull means the partition has as many offsets in flight as the
	// window holds: the caller must stop reading that partition (for
	// example kgo.Client.PauseFetchPartitions) until acks free room.
	ErrWindowFull = errors.New("cursor: ack window full")
	// ErrOffsetBehind means an offset at or below one already read was
	// reported read again; redeliveries must not be reported as reads.
	ErrOffsetBehind = errors.New("cursor: offset already read")
	// ErrNotTracked means the partition was never assigned to the tracker.
	ErrNotTracked = errors.New("cursor: partition not tracked")
)

// DefaultAckWindow is the in-flight window per partition when the
// configured one is zero.
const DefaultAckWindow = 1 << 14

// AckTracker answers, for each partition of one durable subscription, the
// offset that may be committed: the highest offset below which every read
// event was acknowledged or filtered out. Acks may arrive out of order,
// twice, for offsets never delivered, or for partitions not tracked.
//
// Each partition costs a fixed bitmap of Window bits (Window/8 bytes) plus a
// few words, whatever the traffic; every operation is O(1) amortised. Reads
// beyond Window offsets past the committable one fail with ErrWindowFull.
//
// An AckTracker is not safe for concurrent use: one delivery goroutine owns
// it.
type AckTracker struct {
	window int
	parts  []*ackWindow // indexed by partition; nil when not tracked
}

// NewAckTracker returns a tracker whose per-partition window is window
// offsets, rounded up to a power of two of at least 64; zero means
// DefaultAckWindow.
func NewAckTracker(window int) *AckTracker {
	if window <= 0 {
		window = DefaultAckWindow
	}
	if window < 64 {
		window = 64
	}
	if window&(window-1) != 0 {
		window = 1 << bits.Len(uint(window))
	}
	return &AckTracker{window: window}
}

// Window is the effective per-partition window.
func (t *AckTracker) Window() int { return t.window }

// Assign starts tracking partition p from start, the offset reading resumes
// at (the committed offset). Re-assigning resets the partition.
func (t *AckTracker) Assign(p int32, start int64) error {
	if p < 0 || p >= MaxPartitions || start < 0 {
		return fmt.Errorf("cursor: assign partition %d at %d: out of range", p, start)
	}
	for int(p) >= len(t.parts) {
		t.parts = append(t.parts, nil)
	}
	t.parts[p] = newAckWindow(start, t.window)
	return nil
}

// Revoke stops tracking p; later acks for it are AckUnknown.
func (t *AckTracker) Revoke(p int32) {
	if p >= 0 && int(p) < len(t.parts) {
		t.parts[p] = nil
	}
}

func (t *AckTracker) part(p int32) *ackWindow {
	if p < 0 || int(p) >= len(t.parts) {
		return nil
	}
	return t.parts[p]
}

// Delivered records that offset off of p was read and delivered: it is
// pending until Ack. Offsets between the previous read and off count as
// done (Kafka skips offsets: compaction, transaction markers).
func (t *AckTracker) Delivered(p int32, off int64) error { return t.read(p, off, true) }

// Filtered records that offset off of p was read and not delivered (the
// subscription's filter did not match): it is done at once.
func (t *AckTracker) Filtered(p int32, off int64) error { return t.read(p, off, false) }

func (t *AckTracker) read(p int32, off int64, pending bool) error {
	w := t.part(p)
	if w == nil {
		return ErrNotTracked
	}
	return w.read(off, pending)
}

// Ack records an acknowledgement (or a dead-lettering, which also settles
// the event) of offset off of p.
func (t *AckTracker) Ack(p int32, off int64) AckResult {
	w := t.part(p)
	if w == nil {
		return AckUnknown
	}
	return w.ack(off)
}

// Committable returns the offset p may commit (the Kafka convention: the
// next offset to consume) and whether p is tracked.
func (t *AckTracker) Committable(p int32) (int64, bool) {
	w := t.part(p)
	if w == nil {
		return 0, false
	}
	return w.base, true
}

// Room returns how many more offsets of p may be read before ErrWindowFull;
// zero means pause the partition. An untracked partition has no room.
func (t *AckTracker) Room(p int32) int64 {
	w := t.part(p)
	if w == nil {
		return 0
	}
	return w.room()
}

// Pending returns how many delivered offsets of p await an ack.
func (t *AckTracker) Pending(p int32) int {
	w := t.part(p)
	if w == nil {
		return 0
	}
	return w.pending
}

// Frontier returns the committable offset of every tracked partition,
// sorted by partition: the subscription's server-side cursor.
func (t *AckTracker) Frontier() []PartitionOffset {
	var out []PartitionOffset
	for p, w := range t.parts {
		if w != nil {
			out = append(out, PartitionOffset{Partition: int32(p), Offset: w.base})
		}
	}
	return out
}
