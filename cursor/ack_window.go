package cursor

import "math/bits"

// ackWindow tracks one partition of a durable subscription. Offsets are read
// in increasing order; each read offset is either delivered (pending until
// acknowledged) or done at once (filtered out, or skipped by Kafka:
// compaction, transaction markers). base is the lowest offset not known to
// be done, i.e. the offset that may be committed; next is the next offset
// the reader will see. Done bits for [base, next) live in a ring of size
// len(words)*64 indexed by offset; bits outside [base, next) are zero.
type ackWindow struct {
	base    int64
	next    int64
	pending int
	mask    int64 // ring size - 1; ring size is a power of two >= 64
	words   []uint64
}

func newAckWindow(start int64, size int) *ackWindow {
	return &ackWindow{base: start, next: start, mask: int64(size - 1), words: make([]uint64, size/64)}
}

func (w *ackWindow) size() int64 { return w.mask + 1 }

// room is how many more offsets may be read before the window is full.
func (w *ackWindow) room() int64 { return w.base + w.size() - w.next }

func (w *ackWindow) isDone(o int64) bool {
	i := o & w.mask
	return w.words[i>>6]&(1<<(i&63)) != 0
}

// setDone marks [from, to) done; the range lies inside [base, base+size).
func (w *ackWindow) setDone(from, to int64) {
	for o := from; o < to; {
		i := o & w.mask
		bit := i & 63
		n := min(64-bit, to-o, w.size()-i) // stay inside one word
		var m uint64
		if n == 64 {
			m = ^uint64(0)
		} else {
			m = ((1 << uint(n)) - 1) << uint(bit)
		}
		w.words[i>>6] |= m
		o += n
	}
}

// advance moves base over done offsets, clearing their bits, a word at a
// time: amortised O(1) per offset.
func (w *ackWindow) advance() {
	for w.base < w.next {
		i := w.base & w.mask
		bit := uint(i & 63)
		word := w.words[i>>6] >> bit
		run := int64(bits.TrailingZeros64(^word)) // done offsets from base in this word
		if run > 64-int64(bit) {
			run = 64 - int64(bit)
		}
		if run > w.next-w.base {
			run = w.next - w.base
		}
		if run == 0 {
			return
		}
		var m uint64
		if run == 64 {
			m = ^uint64(0)
		} else {
			m = ((1 << uint(run)) - 1) << bit
		}
		w.words[i>>6] &^= m
		w.base += run
	}
}

// read records that offset o was read, delivered (pending) or not. Offsets
// between next and o were skipped by the log and count as done.
func (w *ackWindow) read(o int64, pending bool) error {
	if o < w.next {
		return ErrOffsetBehind
	}
	if w.base == w.next { // nothing outstanding: skipped offsets need no bits
		if !pending {
			w.base, w.next = o+1, o+1
			return nil
		}
		w.base, w.next = o, o
	}
	if o-w.base >= w.size() {
		return ErrWindowFull
	}
	w.setDone(w.next, o)
	if !pending {
		w.setDone(o, o+1)
	} else {
		w.pending++
	}
	w.next = o + 1
	w.advance()
	return nil
}

func (w *ackWindow) ack(o int64) AckResult {
	switch {
	case o < w.base:
		return AckStale
	case o >= w.next:
		return AckUnknown
	case w.isDone(o):
		return AckDuplicate
	}
	w.setDone(o, o+1)
	w.pending--
	if o == w.base {
		w.advance()
	}
	return AckApplied
}
