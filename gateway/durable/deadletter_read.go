package durable

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// Bounds of RecentDeadLetters.
const (
	// MaxRecentDeadLetters is the most records one call returns.
	MaxRecentDeadLetters = 100
	// maxRecentDeadLetterBytes bounds the values one call holds; past it
	// the read stops early (Truncated).
	maxRecentDeadLetterBytes = 8 << 20
)

// DeadLetterRecord is one record of a tenant's dead-letter topic: its
// place, its timestamp and its value as the DeadLetterCodec wrote it.
type DeadLetterRecord struct {
	Partition int32
	Offset    int64
	Time      time.Time
	Value     []byte
}

// RecentDeadLetters reads the newest n (1..MaxRecentDeadLetters) records
// of the tenant's dead-letter topic, newest first (by record timestamp,
// then partition and offset): the last n of each partition, merged. A
// topic that does not exist yet holds none. truncated is true when the
// values passed 8 MiB and the read stopped early. It reads with a
// short-lived client of its own and returns when done or when ctx ends
// (then with ctx's error).
func (e *Cluster) RecentDeadLetters(ctx context.Context, t tenant.Tenant, n int) (recs []DeadLetterRecord, truncated bool, err error) {
	if t.IsZero() || n < 1 || n > MaxRecentDeadLetters {
		return nil, false, fmt.Errorf("%w: tenant and 1..%d records", ErrBadRequest, MaxRecentDeadLetters)
	}
	if err := e.ensure(ctx, t); err != nil {
		return nil, false, err
	}
	topic := e.cfg.Naming.DeadLetter(t.String())
	from, end, err := tailOffsets(ctx, e.adm, topic, int64(n))
	if err != nil || len(from) == 0 {
		return nil, false, err
	}
	cl, err := kgo.NewClient(e.readerOpts(topic, from)...)
	if err != nil {
		return nil, false, fmt.Errorf("durable: dead letters: %w", err)
	}
	defer cl.Close()
	var size int
	for len(end) > 0 && !truncated {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, false, fmt.Errorf("durable: dead letters of %s: %w", topic, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if size += len(r.Value); size > maxRecentDeadLetterBytes {
				truncated = true
				return
			}
			recs = append(recs, DeadLetterRecord{Partition: r.Partition, Offset: r.Offset, Time: r.Timestamp, Value: r.Value})
			if r.Offset+1 >= end[r.Partition] {
				delete(end, r.Partition)
			}
		})
	}
	slices.SortFunc(recs, func(a, b DeadLetterRecord) int {
		if c := b.Time.Compare(a.Time); c != 0 {
			return c
		}
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(b.Offset - a.Offset)
	})
	return recs[:min(n, len(recs))], truncated, nil
}

// tailOffsets is, per partition of topic holding records, the offset of
// its last n (or its start) and its end offset. A missing topic has none.
func tailOffsets(ctx context.Context, adm *kadm.Client, topic string, n int64) (map[int32]kgo.Offset, map[int32]int64, error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("durable: dead-letter offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("durable: dead-letter offsets of %s: %w", topic, err)
	}
	from, end := map[int32]kgo.Offset{}, map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		s, _ := starts.Lookup(topic, o.Partition)
		if o.Offset > s.Offset {
			from[o.Partition] = kgo.NewOffset().At(max(s.Offset, o.Offset-n))
			end[o.Partition] = o.Offset
		}
	})
	return from, end, nil
}
