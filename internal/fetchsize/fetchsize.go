// Package fetchsize keeps a Kafka reader's fetches near a number of bytes
// decoded. Kafka (and franz-go's FetchMaxBytes) bound a fetch in bytes as
// stored, compressed: a fetch of 256 KiB of events that compress 100x
// decodes to 25 MiB, and a reader that holds one fetch while its client
// does not read holds that. A Sizer, given to the reader as a hook, learns
// the compression ratio of what it read and lowers (or raises back) the
// next fetches' bound so that they decode to about the target. One batch
// larger than the bound is still fetched whole (Kafka returns at least
// one): the gateway's producer makes batches of at most about 1 MB before
// compression, so that is what one fetch may decode to at the least.
package fetchsize

import (
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Min is the smallest bound a Sizer sets, and the first fetch's: until a
// reader has seen how its data compresses, it fetches one batch at a time
// (Kafka returns at least one whole batch).
const Min = 1 << 10

// Sizer is a kgo hook (kgo.WithHooks) and the adjuster of one client.
type Sizer struct {
	target  int32
	stored  atomic.Int64 // compressed bytes read since the last Adjust
	decoded atomic.Int64 // the same, decoded
	bound   atomic.Int32 // the bound set last
}

// New returns a Sizer aiming at target decoded bytes per fetch.
func New(target int32) *Sizer {
	s := &Sizer{target: max(target, Min)}
	s.bound.Store(Min)
	return s
}

// OnFetchBatchRead implements kgo.HookFetchBatchRead.
func (s *Sizer) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	s.stored.Add(int64(m.CompressedBytes))
	s.decoded.Add(int64(m.UncompressedBytes))
}

// Opts are the client options that install s: the hook and the first
// fetch's bound (after the caller's options, they override theirs).
func (s *Sizer) Opts() []kgo.Opt {
	return []kgo.Opt{kgo.WithHooks(s), kgo.FetchMaxBytes(Min), kgo.FetchMaxPartitionBytes(Min)}
}

// Adjust sets cl's fetch bounds from the ratio of what was read since the
// last call (call it after each poll). Nothing read: the bound stays.
func (s *Sizer) Adjust(cl *kgo.Client) {
	stored, decoded := s.stored.Swap(0), s.decoded.Swap(0)
	if stored <= 0 || decoded <= 0 {
		return
	}
	n := int32(min(max(int64(s.target)*stored/decoded, Min), int64(s.target)))
	if s.bound.Swap(n) != n {
		cl.UpdateFetchMaxBytes(n, n)
	}
}

// Bound is the fetch bound set last (tests, metrics).
func (s *Sizer) Bound() int32 { return s.bound.Load() }
