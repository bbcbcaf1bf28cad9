// Package gather spaces the polls of a Kafka reader that is not latency
// bound (the audit sealer, the cursor indexer, the task-state worker): at
// the tail of its partitions, under a trickle of single events, such a
// reader would otherwise fetch, and write and commit what it derived, once
// per produced batch, each one a request the broker answers. Waiting a
// little after a small poll lets the next one bring what gathered
// meanwhile: one fetch, one write, one commit for many events.
//
// A broker-side minimum (kgo.FetchMinBytes) cannot do it for a reader
// whose fetch bound is lowered under that minimum (internal/fetchsize):
// Kafka counts the minimum within the partitions' bounds, so the fetch
// would wait its whole FetchMaxWait.
package gather

import (
	"context"
	"time"
)

// Bytes is the decoded size under which a poll may have been at the tail.
const Bytes = 256 << 10

// AtTail reports whether a poll that decoded decoded bytes, under a fetch
// bound of bound bytes (0: none known), read less than it could have: less
// than Bytes and less than half the bound. A reader catching up fills its
// fetches and is never held.
func AtTail(decoded int, bound int32) bool {
	return decoded < Bytes && (bound <= 0 || decoded < int(bound)/2)
}

// Wait waits d, or until ctx ends.
func Wait(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
