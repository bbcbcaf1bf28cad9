package durable

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// readProgress is how far a follower of a topic has read, per partition,
// for callers that must see everything up to some end offset.
type readProgress struct {
	mu  sync.Mutex
	pos map[int32]int64 // next offset to read
	adv chan struct{}   // closed and replaced when pos moves
	err error           // the follower stopped
}

func newReadProgress() *readProgress {
	return &readProgress{pos: map[int32]int64{}, adv: make(chan struct{})}
}

// set records the next offsets to read (or, with err, that reading
// stopped) and wakes the waiters.
func (r *readProgress) set(next map[int32]int64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, o := range next {
		r.pos[p] = max(r.pos[p], o)
	}
	if err != nil {
		r.err = err
	}
	close(r.adv)
	r.adv = make(chan struct{})
}

// waitPast waits until partition p was read up to end.
func (r *readProgress) waitPast(ctx context.Context, p int32, end int64) error {
	for {
		r.mu.Lock()
		ok, adv, err := r.pos[p] >= end, r.adv, r.err
		r.mu.Unlock()
		if ok {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-adv:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// endOffsets lists topic's end offsets. A topic created a moment ago may
// not be known to every broker yet: that is retried for a while.
func (e *Cluster) endOffsets(ctx context.Context, topic string) (kadm.ListedOffsets, error) {
	for attempt := 0; ; attempt++ {
		ends, err := e.adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		if err == nil {
			return ends, nil
		}
		fresh := errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.LeaderNotAvailable) || errors.Is(err, kerr.NotLeaderForPartition)
		if !fresh || attempt >= 50 {
			return nil, fmt.Errorf("durable: end offsets of %s: %w", topic, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("durable: end offsets of %s: %w", topic, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
