// Package sealer is the audit sealer (docs/audit.md): a member of a Kafka
// consumer group over every tenant events topic that seals each record
// into its partition's Merkle tree (package internal/auditlog) and writes
// signed checkpoints to the tenant's audit topic, partition for partition:
// at every anchor (each 1024 records) and, for records sealed since, every
// Interval.
//
// One sealer owns a partition at a time, through the group's assignment.
// On assignment it continues the partition's chain from the last
// checkpoint of its audit partition (not from the group's committed
// offset, which only shows its lag): whatever it sealed but had not
// written before a crash is sealed again to the same heads, because a head
// depends on the records alone. A zombie that still writes after losing
// the partition writes heads identical to its successor's for every size
// both write, so no tree size ever has two different signed heads.
//
// Order: a poll's checkpoints are produced (acks=all, idempotent) and
// acknowledged before its offsets are committed and before the next poll.
// Run owns the clients it creates and closes them before it returns.
package sealer

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/aep-gateway/aep-gateway/internal/auditlog"
	"github.com/aep-gateway/aep-gateway/internal/auditread"
	"github.com/aep-gateway/aep-gateway/internal/fetchsize"
	"github.com/aep-gateway/aep-gateway/internal/gather"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// Defaults for zero Config fields.
const (
	DefaultGroup          = "aep-audit-sealers"
	DefaultInterval       = 5 * time.Second
	DefaultMetadataMaxAge = 10 * time.Second
	DefaultSessionTimeout = 10 * time.Second
)

// DefaultFetchBytes is what one fetch of a sealer decodes to, about
// (internal/fetchsize: at least one producer batch).
const DefaultFetchBytes = 1 << 20

// sealGatherWait: after a poll at the tail (internal/gather), the sealer
// waits up to this (less with a shorter Interval) before it polls again,
// so under a trickle of small batches it reads what gathered meanwhile in
// one fetch instead of one fetch per produced batch (which doubled the
// embedded broker's CPU per event: docs/benchmarks.md, "Audit sealer").
const sealGatherWait = time.Second

// Config configures a Sealer.
type Config struct {
	// ClientOpts connect the sealer's Kafka clients. Required.
	ClientOpts []kgo.Opt
	// Naming gives the tenant topics (found by a regular expression made
	// from its template) and their audit topics.
	Naming partitioning.Naming
	// TopicRegexp matches the events topics, its first group the tenant.
	// Required.
	TopicRegexp *regexp.Regexp
	// Signer signs the checkpoints. Required.
	Signer *auditlog.Signer
	// Keys verify the checkpoint a partition's chain continues from (the
	// signer's key and the ones before it). Nil means the signer's only.
	Keys auditlog.Keys
	// Group is the sealers' consumer group. Zero means DefaultGroup.
	Group string
	// Interval is how often records sealed since the last checkpoint are
	// checkpointed. Zero means DefaultInterval.
	Interval time.Duration
	// ReplicationFactor of the audit topics the sealer creates; 0 or -1
	// means the broker's default.
	ReplicationFactor int16
	// RetentionBytes per partition of the audit topics the sealer creates;
	// 0 keeps them whole (the embedded broker bounds them: docs/audit.md).
	RetentionBytes int64
	// MetadataMaxAge bounds how long a new tenant topic goes unsealed.
	MetadataMaxAge time.Duration
	// SessionTimeout is the group session timeout.
	SessionTimeout time.Duration
	// FetchBytes is what one fetch decodes to, about (records as the
	// sealer holds them, not as stored compressed). Zero means
	// DefaultFetchBytes.
	FetchBytes int32
	Logger     zerolog.Logger
	Registerer prometheus.Registerer
}

// Sealer seals the tenant topics. Run it once.
type Sealer struct {
	cfg     Config
	metrics metrics
	adm     *kadm.Client
	prod    *kgo.Client
	opts    []kgo.Opt

	produceErr atomic.Pointer[error]

	mu     sync.Mutex
	chains map[topicPartition]*partState // assigned partitions; guarded by mu
}

type topicPartition struct {
	topic     string
	partition int32
}

type partState struct {
	tenant    string
	audit     string
	chain     *auditlog.Chain
	lastWrite time.Time
	commit    int64 // offset to commit once the written checkpoints are acknowledged
	committed int64
}

type metrics struct {
	sealed, checkpoints, restarts, gaps, broken prometheus.Counter
	partitions                                  prometheus.Gauge
}

// New validates cfg.
func New(cfg Config) (*Sealer, error) {
	if len(cfg.ClientOpts) == 0 || cfg.TopicRegexp == nil || cfg.Signer == nil {
		return nil, errors.New("sealer: Config.ClientOpts, TopicRegexp and Signer are required")
	}
	if err := cfg.Naming.Validate(); err != nil {
		return nil, err
	}
	if cfg.Group == "" {
		cfg.Group = DefaultGroup
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MetadataMaxAge <= 0 {
		cfg.MetadataMaxAge = DefaultMetadataMaxAge
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.FetchBytes <= 0 {
		cfg.FetchBytes = DefaultFetchBytes
	}
	if cfg.ReplicationFactor == 0 {
		cfg.ReplicationFactor = -1
	}
	if cfg.Keys == nil {
		cfg.Keys = auditlog.Keys{}
	}
	cfg.Keys.Add(cfg.Signer.Public())
	s := &Sealer{cfg: cfg, chains: map[topicPartition]*partState{}, metrics: metrics{
		sealed:      prometheus.NewCounter(prometheus.CounterOpts{Name: "aep_audit_records_sealed_total", Help: "Events records sealed into a partition's Merkle tree."}),
		checkpoints: prometheus.NewCounter(prometheus.CounterOpts{Name: "aep_audit_checkpoints_total", Help: "Signed checkpoints written to audit topics."}),
		restarts:    prometheus.NewCounter(prometheus.CounterOpts{Name: "aep_audit_epochs_started_total", Help: "Chains restarted because a partition's log restarted below what was sealed (truncated and refilled): always worth an alert."}),
		gaps:        prometheus.NewCounter(prometheus.CounterOpts{Name: "aep_audit_unsealed_records_total", Help: "Records deleted by retention before they were sealed (the sealer was down longer than the retention)."}),
		broken:      prometheus.NewCounter(prometheus.CounterOpts{Name: "aep_audit_partitions_refused_total", Help: "Assigned partitions left unsealed because their last checkpoint does not verify (docs/audit.md)."}),
		partitions:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "aep_audit_partitions", Help: "Events partitions this sealer owns."}),
	}}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{s.metrics.sealed, s.metrics.checkpoints, s.metrics.restarts, s.metrics.gaps, s.metrics.broken, s.metrics.partitions} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("sealer: metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Run seals until ctx ends (nil; the checkpoints due are written first) or
// a Kafka write fails (the error: the caller should exit, and the group
// hands the partitions to the other sealers).
func (s *Sealer) Run(ctx context.Context) error {
	base := append([]kgo.Opt{kgo.MetadataMaxAge(s.cfg.MetadataMaxAge), kgo.MetadataMinAge(min(s.cfg.MetadataMaxAge, 5*time.Second))}, s.cfg.ClientOpts...)
	s.opts = base
	prod, err := kgo.NewClient(append(append([]kgo.Opt(nil), base...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchMaxBytes(4<<20))...)
	if err != nil {
		return fmt.Errorf("sealer: producer: %w", err)
	}
	defer prod.Close()
	s.prod = prod
	s.adm = kadm.NewClient(prod)
	// Bounded in bytes decoded: a fetch bound in bytes as stored (4 MiB
	// here before) decoded to hundreds of MiB over compressible events,
	// which a sealer catching up on a burst held beside the gateway's
	// streams (the catch-up memory tests ran with the sealer off for it).
	sizer := fetchsize.New(s.cfg.FetchBytes)
	cl, err := kgo.NewClient(append(append(append([]kgo.Opt(nil), base...),
		kgo.ConsumerGroup(s.cfg.Group), kgo.ConsumeRegex(), kgo.ConsumeTopics(s.cfg.TopicRegexp.String()),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(), kgo.SessionTimeout(s.cfg.SessionTimeout),
		// Sealing is not latency bound (a checkpoint each Interval): a
		// fetch waits for a first batch, and the poll loop gathers
		// (sealGatherWait).
		kgo.FetchMinBytes(fetchsize.Min), kgo.FetchMaxWait(max(min(s.cfg.Interval, 5*time.Second), 10*time.Millisecond)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AdjustFetchOffsetsFn(s.assigned),
		kgo.OnPartitionsRevoked(s.revoked), kgo.OnPartitionsLost(s.lost)), sizer.Opts()...)...)
	if err != nil {
		return fmt.Errorf("sealer: consumer: %w", err)
	}
	defer cl.Close()
	s.cfg.Logger.Info().Str("group", s.cfg.Group).Str("key_id", s.cfg.Signer.KeyID()).Msg("audit sealer started")
	for {
		pctx, cancel := context.WithTimeout(ctx, s.cfg.Interval)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil || fs.IsClientClosed() {
			err := s.drain(cl)
			cl.AllowRebalance() // Close leaves the group, which a blocked rebalance would hold up
			return err
		}
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				s.cfg.Logger.Warn().Err(err).Str("topic", topic).Int32("partition", p).Msg("sealer: fetch")
			}
		})
		var decoded int
		s.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			decoded += len(r.Key) + len(r.Value)
			s.sealLocked(r)
		})
		s.dueLocked(time.Now(), false)
		s.mu.Unlock()
		sizer.Adjust(cl)
		if err := s.flushAndCommit(ctx, cl); err != nil {
			if ctx.Err() != nil {
				err = s.drain(cl)
			}
			cl.AllowRebalance()
			return err
		}
		cl.AllowRebalance()
		if gather.AtTail(decoded, sizer.Bound()) {
			gather.Wait(ctx, min(sealGatherWait, s.cfg.Interval/4))
		}
	}
}

// drain writes every checkpoint due, waits for it and commits, on a
// context of its own (Run's ended).
func (s *Sealer) drain(cl *kgo.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.mu.Lock()
	s.dueLocked(time.Now(), true)
	s.mu.Unlock()
	return s.flushAndCommit(ctx, cl)
}

// sealLocked seals one record. Must hold mu.
func (s *Sealer) sealLocked(r *kgo.Record) {
	st := s.chains[topicPartition{r.Topic, r.Partition}]
	if st == nil {
		return // not ours (revoked meanwhile) or refused
	}
	c := st.chain
	if c.Behind(r.Offset) {
		// The log restarted under what was sealed: close the epoch and
		// begin the next, which names its last head.
		s.writeLocked(st, r.Partition)
		c.Restart()
		s.metrics.restarts.Inc()
		s.cfg.Logger.Error().Str("topic", r.Topic).Int32("partition", r.Partition).Int64("offset", r.Offset).Uint32("epoch", c.Epoch()).
			Msg("sealer: the partition's log restarted below its last sealed offset (truncated and refilled?); sealing a new epoch: `aepctl audit verify` reports the sealed records that are gone")
	} else if last := c.LastOffset(); last >= 0 && r.Offset > last+1 {
		s.metrics.gaps.Add(float64(r.Offset - last - 1))
		s.cfg.Logger.Warn().Str("topic", r.Topic).Int32("partition", r.Partition).Int64("from", last+1).Int64("to", r.Offset).
			Msg("sealer: records were deleted before they were sealed (retention shorter than the sealer's downtime)")
	}
	content := auditlog.ContentHash(auditread.RecordOf(r))
	s.metrics.sealed.Inc()
	if c.Append(r.Offset, content, r.Timestamp.UnixMilli()) {
		s.writeLocked(st, r.Partition)
	}
}

// dueLocked writes the checkpoints due at now (all pending ones when
// all). Must hold mu.
func (s *Sealer) dueLocked(now time.Time, all bool) {
	for tp, st := range s.chains {
		if st.chain.Pending() > 0 && (all || now.Sub(st.lastWrite) >= s.cfg.Interval) {
			s.writeLocked(st, tp.partition)
		}
	}
}

// writeLocked produces the checkpoint of st's pending records. Must hold
// mu; the produce callback takes no lock.
func (s *Sealer) writeLocked(st *partState, p int32) {
	cp := st.chain.Checkpoint(s.cfg.Signer)
	if cp == nil {
		return
	}
	st.lastWrite = time.Now()
	st.commit = cp.Head.LastOffset + 1
	s.prod.Produce(context.Background(), &kgo.Record{Topic: st.audit, Partition: p, Key: cp.Key(), Value: cp.Marshal()},
		func(_ *kgo.Record, err error) {
			if err != nil {
				s.produceErr.CompareAndSwap(nil, &err)
				return
			}
			s.metrics.checkpoints.Inc()
		})
}

// flushAndCommit waits for every checkpoint produced, then commits the
// offsets they cover (the group's lag is the sealing lag).
func (s *Sealer) flushAndCommit(ctx context.Context, cl *kgo.Client) error {
	if err := s.prod.Flush(ctx); err != nil {
		return fmt.Errorf("sealer: flush checkpoints: %w", err)
	}
	if p := s.produceErr.Load(); p != nil {
		return fmt.Errorf("sealer: write checkpoint: %w", *p)
	}
	commit := map[string]map[int32]kgo.EpochOffset{}
	s.mu.Lock()
	for tp, st := range s.chains {
		if st.commit > st.committed {
			if commit[tp.topic] == nil {
				commit[tp.topic] = map[int32]kgo.EpochOffset{}
			}
			commit[tp.topic][tp.partition] = kgo.EpochOffset{Epoch: -1, Offset: st.commit}
			st.committed = st.commit
		}
	}
	s.mu.Unlock()
	if len(commit) > 0 {
		cl.CommitOffsetsSync(ctx, commit, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				s.cfg.Logger.Debug().Err(err).Msg("sealer: commit (the lag metric only: chains continue from the audit topic)")
			}
		})
	}
	return nil
}

// revoked writes the pending checkpoints of the partitions taken away
// and forgets them.
func (s *Sealer) revoked(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.mu.Lock()
	for topic, ps := range lost {
		for _, p := range ps {
			if st := s.chains[topicPartition{topic, p}]; st != nil {
				s.writeLocked(st, p)
			}
		}
	}
	s.mu.Unlock()
	if err := s.prod.Flush(ctx); err != nil {
		s.cfg.Logger.Warn().Err(err).Msg("sealer: checkpoints of revoked partitions (their next owner seals the same heads)")
	}
	s.forget(lost)
}

// lost forgets partitions lost without a clean revoke.
func (s *Sealer) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) { s.forget(lost) }

func (s *Sealer) forget(ps map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for topic, parts := range ps {
		for _, p := range parts {
			delete(s.chains, topicPartition{topic, p})
		}
	}
	s.metrics.partitions.Set(float64(len(s.chains)))
}
