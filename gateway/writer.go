package gateway

import (
	"context"
	"errors"
	"fmt"
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
type Writer interface {
	Write(ctx context.Context, recs []*kgo.Record) []error
}

// KafkaWriter is the Writer over a franz-go client, which must be configured
// for acks=all and idempotence (NewProducerOpts).
type KafkaWriter struct{ Client *kgo.Client }

var _ Writer = KafkaWriter{}

// ErrUnacknowledged is the outcome of a record Kafka did not acknowledge
// before the write's context ended: it may or may not be in the log, so the
// client must retry it with the same id (consumers dedupe on id).
var ErrUnacknowledged = errors.New("kafka did not acknowledge the event in time; it may or may not be in the log")

// Write implements Writer. It returns when every record has an outcome or
// ctx ends; records still unacknowledged then get ErrUnacknowledged (their
// late outcome is discarded: the buffered channel never blocks the client).
func (w KafkaWriter) Write(ctx context.Context, recs []*kgo.Record) []error {
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(recs))
	for i, r := range recs {
		w.Client.Produce(ctx, r, func(_ *kgo.Record, err error) { results <- result{i, err} })
	}
	errs := make([]error, len(recs))
	pending := make([]bool, len(recs))
	for i := range pending {
		pending[i] = true
	}
	for n := 0; n < len(recs); n++ {
		select {
		case res := <-results:
			errs[res.i], pending[res.i] = res.err, false
		case <-ctx.Done():
			for i, p := range pending {
				if p {
					errs[i] = fmt.Errorf("%w: %w", ErrUnacknowledged, ctx.Err())
				}
			}
			return errs
		}
	}
	return errs
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
	}
}
