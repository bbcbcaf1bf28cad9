package durable

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// MaxScanRecords bounds the records one FindRecords call reads.
const MaxScanRecords = 10_000_000

// Scan is what FindRecords read and found.
type Scan struct {
	Found    []*kgo.Record
	Scanned  int  // records read
	Complete bool // every partition asked for was read to its end
}

// EventsTopic and DeadLetterTopic are the tenant's topics.
func (e *Cluster) EventsTopic(t tenant.Tenant) string     { return e.cfg.Naming.Events(t.String()) }
func (e *Cluster) DeadLetterTopic(t tenant.Tenant) string { return e.cfg.Naming.DeadLetter(t.String()) }

// AuditTopic is the tenant's topic of signed checkpoints (docs/audit.md).
func (e *Cluster) AuditTopic(t tenant.Tenant) string { return e.cfg.Naming.Audit(t.String()) }

// FindRecords reads topic from the start of each partition (one, or every
// one when partition < 0) to the end it had when the call began, and
// returns the records match keeps, up to limit of them (the read stops at
// the limit), having read at most maxRecords records. It reads with a
// short-lived client of its own; a topic that does not exist holds none.
// The audit record of an event (GET /aep/audit/events/{id}) is found this
// way: the log has no index by event id, so the cost is the partition's
// records, bounded. A partition whose last offsets are never returned as
// records (compacted away, transaction markers: the tenant topics are
// neither) keeps the read going until ctx ends, which the caller bounds.
func (e *Cluster) FindRecords(ctx context.Context, topic string, partition int32, maxRecords, limit int, match func(*kgo.Record) bool) (Scan, error) {
	if maxRecords < 1 || maxRecords > MaxScanRecords || limit < 1 {
		return Scan{}, fmt.Errorf("%w: 1..%d records to read, at least one to find", ErrBadRequest, MaxScanRecords)
	}
	from, end, err := tailOffsets(ctx, e.adm, topic, 1<<62) // from each partition's start
	if err != nil || len(from) == 0 {
		return Scan{Complete: err == nil}, err
	}
	if partition >= 0 {
		f, ok := from[partition]
		if !ok {
			return Scan{Complete: true}, nil // empty, or no such partition
		}
		from = map[int32]kgo.Offset{partition: f}
		end = map[int32]int64{partition: end[partition]}
	}
	cl, err := kgo.NewClient(e.readerOpts(topic, from)...)
	if err != nil {
		return Scan{}, fmt.Errorf("durable: scan %s: %w", topic, err)
	}
	defer cl.Close()
	var s Scan
	for len(end) > 0 && s.Scanned < maxRecords && len(s.Found) < limit {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return s, fmt.Errorf("durable: scan %s: %w", topic, err)
		}
		var fetchErr error
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.Canceled) {
				fetchErr = err
			}
		})
		if fetchErr != nil {
			return s, fmt.Errorf("durable: scan %s: %w", topic, fetchErr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if s.Scanned >= maxRecords || len(s.Found) >= limit {
				return
			}
			s.Scanned++
			if match(r) {
				s.Found = append(s.Found, r)
			}
			if r.Offset+1 >= end[r.Partition] {
				delete(end, r.Partition)
			}
		})
	}
	s.Complete = len(end) == 0
	return s, nil
}
