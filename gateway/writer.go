package gateway

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Writer writes event records to Kafka.
//
// Write produces every record and returns only when Kafka has acknowledged
// or failed each one; errs[i] is the outcome of recs[i] and, on success,
// recs[i].Partition and recs[i].Offset hold its place in the log. Records of
// one call keep their order within a partition. Write is safe for concurrent
// use. Cancelling ctx abandons waiting only for records not yet sent.
//
// Once Write returns, the caller reuses the records and the bytes they
// point to for its next request, except when some outcome is
// ErrUnacknowledged: a Writer must not read them afterwards otherwise.
type Writer interface {
	Write(ctx context.Context, recs []*kgo.Record) []error
}

// KafkaWriter is the Writer over a franz-go client, which must be configured
// for acks=all and idempotence (NewProducerOpts).
type KafkaWriter struct{ Client *kgo.Client }

var _ Writer = KafkaWriter{}

// LateWriter is an optional capability of a Writer (found by type
// assertion): WriteLate is Write where ctx bounds the records' life in the
// producer but the wait for their outcomes ends after at most wait (0: no
// bound of its own). Records still unacknowledged then get
// ErrUnacknowledged, and each one's outcome, when it comes, is passed to
// late (nil: dropped), once per record, from the producer's goroutine:
// late must not block. The records and their bytes stay untouched by
// WriteLate's caller until then (Write's rule for ErrUnacknowledged).
type LateWriter interface {
	WriteLate(ctx context.Context, wait time.Duration, recs []*kgo.Record, late func(r *kgo.Record, err error)) []error
}

var _ LateWriter = KafkaWriter{}

// ErrUnacknowledged is the outcome of a record Kafka did not acknowledge
// before the write's context ended: it may or may not be in the log, so the
// client must retry it with the same id (consumers dedupe on id).
var ErrUnacknowledged = errors.New("kafka did not acknowledge the event in time; it may or may not be in the log")

// Write implements Writer. It returns when every record has an outcome or
// ctx ends; records still unacknowledged then get ErrUnacknowledged (their
// late outcome is discarded).
//
// One promise serves every record of the call: it gathers outcomes under
// a mutex, so a write costs a few allocations, none per record. A record's
// place in recs is looked up by pointer only when something failed or the
// context ended first.
func (w KafkaWriter) Write(ctx context.Context, recs []*kgo.Record) []error {
	return w.WriteLate(ctx, 0, recs, nil)
}

// WriteLate implements LateWriter.
func (w KafkaWriter) WriteLate(ctx context.Context, wait time.Duration, recs []*kgo.Record, late func(*kgo.Record, error)) []error {
	errs := make([]error, len(recs))
	if len(recs) == 0 {
		return errs
	}
	wt := &writeWait{left: len(recs), acked: make([]*kgo.Record, 0, len(recs)), done: make(chan struct{}), late: late}
	for _, r := range recs {
		w.Client.Produce(ctx, r, wt.promise)
	}
	waitCtx := ctx
	if wait > 0 {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	select {
	case <-wt.done:
	case <-waitCtx.Done():
	}
	wt.mu.Lock()
	defer wt.mu.Unlock()
	wt.closed = true
	if wt.left == 0 && len(wt.failed) == 0 {
		return errs
	}
	outcome := make(map[*kgo.Record]error, len(wt.failed)+len(wt.acked))
	for _, f := range wt.failed {
		outcome[f.r] = f.err
	}
	for _, r := range wt.acked {
		outcome[r] = nil
	}
	for i, r := range recs {
		err, ok := outcome[r]
		switch {
		case ok:
			errs[i] = err
		case wt.left > 0:
			errs[i] = fmt.Errorf("%w: %w", ErrUnacknowledged, waitCtx.Err())
		}
	}
	return errs
}

// writeWait gathers the outcomes of one Write: the failures with their
// errors, the successes (so that, when ctx ends first, the records still
// pending can be told apart) and how many are left.
type writeWait struct {
	mu     sync.Mutex
	left   int // records without an outcome yet
	failed []failedRec
	acked  []*kgo.Record
	closed bool // Write returned: late outcomes go to late, or are dropped
	late   func(*kgo.Record, error)
	done   chan struct{}
}

type failedRec struct {
	r   *kgo.Record
	err error
}

func (wt *writeWait) promise(r *kgo.Record, err error) {
	wt.mu.Lock()
	if wt.closed {
		late := wt.late
		wt.mu.Unlock()
		if late != nil {
			late(r, err)
		}
		return
	}
	defer wt.mu.Unlock()
	if err != nil {
		wt.failed = append(wt.failed, failedRec{r, err})
	} else {
		wt.acked = append(wt.acked, r)
	}
	wt.left--
	if wt.left == 0 {
		close(wt.done)
	}
}

// NewProducerOpts are the client options every gateway producer uses:
// acks from all in-sync replicas, idempotent writes, Kafka's murmur2 key
// placement, a record size bound that fits maxEvent bytes plus headers, no
// linger, and a delivery timeout so that a record Kafka never acknowledges fails within
// writeTimeout instead of being retried forever.
func NewProducerOpts(maxEvent int, writeTimeout time.Duration) []kgo.Opt {
	// 1,000,000 stays under the broker default message.max.bytes
	// (1,048,588); larger events need a broker configured for them.
	maxBatch := int32(maxEvent + 64<<10)
	if maxBatch < 1_000_000 {
		maxBatch = 1_000_000
	}
	return []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.ProducerBatchMaxBytes(maxBatch),
		kgo.ProducerBatchCompression(kgo.Lz4Compression(), kgo.NoCompression()),
		kgo.RecordDeliveryTimeout(writeTimeout),
		// A client waits for its events' acknowledgement: send as soon as
		// a partition has records (batches still form while requests are
		// in flight) instead of lingering for more.
		kgo.ProducerLinger(0),
		// After a broker outage, retry soon: franz-go's default backoff
		// grows to 2.5 s, which can delay the first write after the broker
		// is back by that much (ingest must be accepted again within 2 s of
		// the broker answering, issue 29).
		kgo.RetryBackoffFn(producerBackoff),
		// A partition whose leader was unreachable waits for a metadata
		// refresh, at most one per MetadataMinAge (default 5 s): after an
		// outage that held every write about 2 s past the broker's return.
		kgo.MetadataMinAge(250 * time.Millisecond),
	}
}

// producerBackoff is 100 ms doubling per try up to 400 ms, with up to 20%
// jitter so that clients do not retry in step.
func producerBackoff(tries int) time.Duration {
	d := 100 * time.Millisecond << min(max(tries-1, 0), 2)
	return d + time.Duration(rand.Int64N(int64(d/5)+1))
}
