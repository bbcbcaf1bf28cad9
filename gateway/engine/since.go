package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// MaxSince is the longest look-back a stream's time-based start accepts
// (the since parameter of GET /stream and GET /aep/events): it bounds what a
// client such as the console can ask to read again.
const MaxSince = 24 * time.Hour

// ErrBadSince is a since parameter that is not a duration in (0, MaxSince].
var ErrBadSince = errors.New("since must be a duration such as 90s, 15m or 2h, at most 24h")

// ParseSince reads a stream's since parameter: a Go duration, positive and
// at most MaxSince.
func ParseSince(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > MaxSince {
		return 0, ErrBadSince
	}
	return d, nil
}

// OffsetsAfter returns, for every partition of the tenant's events topic
// in partition order, the first offset whose record timestamp is at or
// after at (Kafka's ListOffsets by timestamp; the gateway's producer stamps
// each record when it writes it), or the partition's end offset when no
// record is that recent. Any node answers the same: it is the broker's
// index.
func (e *Engine) OffsetsAfter(ctx context.Context, t tenant.Tenant, at time.Time) ([]cursor.PartitionOffset, error) {
	st, err := e.State(ctx, t)
	if err != nil {
		return nil, err
	}
	listed, err := e.adm.ListOffsetsAfterMilli(ctx, at.UnixMilli(), st.Topic)
	if err != nil {
		return nil, fmt.Errorf("engine: offsets after %s: %w", at.Format(time.RFC3339), err)
	}
	out := make([]cursor.PartitionOffset, st.Partitions)
	for p := range out {
		lo, ok := listed.Lookup(st.Topic, int32(p))
		if !ok || lo.Err != nil {
			return nil, fmt.Errorf("engine: offset after %s of %s/%d unavailable", at.Format(time.RFC3339), st.Topic, p)
		}
		off := st.End[p] // no record that recent (a broker may say -1)
		if lo.Offset >= 0 {
			// never below the log start nor past the end State saw
			off = min(max(lo.Offset, st.Start[p]), st.End[p])
		}
		out[p] = cursor.PartitionOffset{Partition: int32(p), Offset: off}
	}
	return out, nil
}
