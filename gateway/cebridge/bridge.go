// Package cebridge is the CloudEvents bridge (AEP-0005 §1, docs/analytics.md):
// a member of a Kafka consumer group over every tenant events topic that
// writes each dialect R event, as its CloudEvent in the Kafka protocol
// binding's structured mode, to the tenant's CloudEvents topic, partition
// for partition, so any CloudEvents consumer reads AEP without knowing it.
//
// Exactly once: each poll's CloudEvents and the consumed offsets are one
// Kafka transaction (franz-go's GroupTransactSession: read-process-write,
// KIP-447). A bridge killed mid-transaction leaves it to be aborted; a
// rebalance aborts the open transaction and rewinds to the committed
// offsets. Readers of the CloudEvents topic read with read_committed.
//
// Events above the ceiling (MaxCapture) are down-levelled first
// (aep.Downlevel, AEP-0005 §6: a forwarder is a hop like any). Dialect D
// events have no CloudEvents mapping in either specification: they are
// skipped and counted.
package cebridge

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// DefaultGroup is the bridges' consumer group unless configured.
const DefaultGroup = "aep-cloudevents-bridges"

// ContentType is the content-type header of every record written: the
// structured mode of the CloudEvents Kafka protocol binding.
const ContentType = "application/cloudevents+json; charset=UTF-8"

// Config configures a Bridge.
type Config struct {
	// ClientOpts connect the bridge's client. Required.
	ClientOpts []kgo.Opt
	// Naming gives the CloudEvents topic of each tenant.
	Naming partitioning.Naming
	// TopicRegexp matches the events topics, its first group the tenant.
	TopicRegexp *regexp.Regexp
	// Group is the bridges' consumer group; it names the transactional id
	// too (with InstanceID). Zero means DefaultGroup.
	Group string
	// InstanceID makes this process's transactional id unique in the
	// group (the node id). Required.
	InstanceID string
	// MaxCapture is the ceiling events are down-levelled to. Zero means
	// aep.CaptureMetadata, AEP-0005's exporter default.
	MaxCapture aep.Capture
	// ReplicationFactor of the CloudEvents topics it creates; 0 or -1:
	// the broker's default.
	ReplicationFactor int16
	// SessionTimeout is the group session timeout. Zero means 10 s.
	SessionTimeout time.Duration
	Logger         zerolog.Logger
	Registerer     prometheus.Registerer
}

// Bridge writes the CloudEvents topics. Run it once.
type Bridge struct {
	cfg     Config
	written prometheus.Counter
	skipped *prometheus.CounterVec
	aborted prometheus.Counter
	ensured map[string]int32 // CloudEvents topic -> partitions known to exist; Run's goroutine only
}

// New validates cfg.
func New(cfg Config) (*Bridge, error) {
	if len(cfg.ClientOpts) == 0 || cfg.TopicRegexp == nil || cfg.InstanceID == "" {
		return nil, errors.New("cebridge: Config.ClientOpts, TopicRegexp and InstanceID are required")
	}
	if cfg.Group == "" {
		cfg.Group = DefaultGroup
	}
	if cfg.MaxCapture == 0 {
		cfg.MaxCapture = aep.CaptureMetadata
	}
	if !cfg.MaxCapture.Valid() {
		return nil, fmt.Errorf("cebridge: MaxCapture %d is not a level", cfg.MaxCapture)
	}
	if cfg.ReplicationFactor == 0 {
		cfg.ReplicationFactor = -1
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 10 * time.Second
	}
	b := &Bridge{cfg: cfg, ensured: map[string]int32{},
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "aep_cloudevents_bridge_written_total", Help: "CloudEvents written (committed or not: a transaction the bridge aborts writes them again)."}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aep_cloudevents_bridge_skipped_total", Help: "Records not written as CloudEvents, by reason: dialect_d (no CloudEvents mapping), invalid (did not map)."}, []string{"reason"}),
		aborted: prometheus.NewCounter(prometheus.CounterOpts{Name: "aep_cloudevents_bridge_aborted_total", Help: "Transactions aborted (a rebalance or a failed commit); their records are read and written again."}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{b.written, b.skipped, b.aborted} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("cebridge: metrics: %w", err)
			}
		}
	}
	return b, nil
}

// Run bridges until ctx ends (nil) or a transaction fails in a way only a
// new process mends (the error: exit, and the group hands the partitions
// to the other bridges from the committed offsets).
func (b *Bridge) Run(ctx context.Context) error {
	sess, err := kgo.NewGroupTransactSession(append(append([]kgo.Opt(nil), b.cfg.ClientOpts...),
		kgo.ConsumerGroup(b.cfg.Group), kgo.ConsumeRegex(), kgo.ConsumeTopics(b.cfg.TopicRegexp.String()),
		kgo.TransactionalID(b.cfg.Group+"-"+b.cfg.InstanceID), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.SessionTimeout(b.cfg.SessionTimeout),
		kgo.FetchMaxBytes(4<<20), kgo.FetchMaxPartitionBytes(1<<20), // a poll is one transaction: bounded
		// (KIP-447's RequireStable is always on in franz-go's group consumers)
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMaxAge(10*time.Second))...)
	if err != nil {
		return fmt.Errorf("cebridge: client: %w", err)
	}
	defer sess.Close()
	b.cfg.Logger.Info().Str("group", b.cfg.Group).Str("max_capture", b.cfg.MaxCapture.String()).Msg("cloudevents bridge started")
	for {
		fs := sess.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return nil
		}
		fs.EachError(func(topic string, p int32, err error) {
			b.cfg.Logger.Warn().Err(err).Str("topic", topic).Int32("partition", p).Msg("cebridge: fetch")
		})
		if fs.NumRecords() == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			return fmt.Errorf("cebridge: begin: %w", err)
		}
		var produceErr error
		fs.EachRecord(func(r *kgo.Record) {
			out, err := b.mapRecord(ctx, sess.Client(), r)
			if err != nil {
				produceErr = errors.Join(produceErr, err)
				return
			}
			if out == nil {
				return
			}
			sess.Produce(ctx, out, func(_ *kgo.Record, err error) {
				if err != nil {
					b.cfg.Logger.Warn().Err(err).Str("topic", out.Topic).Msg("cebridge: produce (the transaction aborts)")
				}
			})
			b.written.Inc()
		})
		try := kgo.TryCommit
		if produceErr != nil {
			try = kgo.TryAbort
		}
		committed, err := sess.End(ctx, try)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("cebridge: end transaction: %w", err)
		}
		if !committed {
			b.aborted.Inc()
		}
		if produceErr != nil {
			return fmt.Errorf("cebridge: %w", produceErr) // aborted: the group's next owner reads it again
		}
	}
}

// mapRecord is the CloudEvents record of r, nil for a record not bridged.
// An error is a CloudEvents topic that could not be provisioned.
func (b *Bridge) mapRecord(ctx context.Context, cl *kgo.Client, r *kgo.Record) (*kgo.Record, error) {
	var attrs aep.Attrs
	if err := partitioning.DecodeHeaders(r.Headers, &attrs); err != nil {
		b.skipped.WithLabelValues("invalid").Inc() // a record written around the gateway
		return nil, nil                            //nolint:nilerr // skipped and counted, not a failure of the bridge
	}
	if attrs.Dialect != aep.DialectR {
		b.skipped.WithLabelValues("dialect_d").Inc()
		return nil, nil
	}
	m := b.cfg.TopicRegexp.FindStringSubmatch(r.Topic)
	if m == nil {
		return nil, nil
	}
	dst := b.cfg.Naming.CloudEvents(m[1])
	if b.ensured[dst] <= r.Partition { // new, or the events topic grew
		if err := partitioning.EnsureMirror(ctx, cl, r.Topic, dst, b.cfg.ReplicationFactor, nil); err != nil {
			return nil, err
		}
		b.ensured[dst] = r.Partition + 1
	}
	raw, _, err := aep.Downlevel(r.Value, b.cfg.MaxCapture, aep.Limits{})
	var ce []byte
	if err == nil {
		ce, err = aep.ToCloudEvent(raw)
	}
	if err != nil {
		b.skipped.WithLabelValues("invalid").Inc()
		b.cfg.Logger.Warn().Err(err).Str("topic", r.Topic).Int32("partition", r.Partition).Int64("offset", r.Offset).Msg("cebridge: the record does not map (skipped)")
		return nil, nil
	}
	return &kgo.Record{Topic: dst, Partition: r.Partition, Key: r.Key, Value: ce, Timestamp: r.Timestamp,
		Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte(ContentType)}}}, nil
}
