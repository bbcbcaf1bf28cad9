package sealer

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/internal/auditlog"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// assigned is the group's AdjustFetchOffsetsFn: for each partition
// assigned it restores the chain from the last checkpoint of its audit
// partition and starts reading after the last sealed record (or from the
// log start when none was sealed), whatever offset the group committed.
func (s *Sealer) assigned(ctx context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	out := make(map[string]map[int32]kgo.Offset, len(offs))
	for topic, ps := range offs {
		m := s.cfg.TopicRegexp.FindStringSubmatch(topic)
		if m == nil {
			continue
		}
		tenant := m[1]
		audit := s.cfg.Naming.Audit(tenant)
		states, err := s.restore(ctx, topic, tenant, audit, ps)
		if err != nil {
			return nil, err
		}
		out[topic] = map[int32]kgo.Offset{}
		s.mu.Lock()
		for p, st := range states {
			if st == nil {
				continue
			}
			s.chains[topicPartition{topic, p}] = st
			out[topic][p] = kgo.NewOffset().At(st.chain.LastOffset() + 1)
		}
		s.metrics.partitions.Set(float64(len(s.chains)))
		s.mu.Unlock()
		for p := range ps {
			if _, ok := out[topic][p]; !ok { // refused: read from the end, seal nothing
				out[topic][p] = kgo.NewOffset().AtEnd()
			}
		}
	}
	return out, nil
}

// restore builds the state of topic's partitions ps: nil for a partition
// whose last checkpoint does not verify (refused, logged).
func (s *Sealer) restore(ctx context.Context, topic, tenant, audit string, ps map[int32]kgo.Offset) (map[int32]*partState, error) {
	if err := s.ensureAudit(ctx, topic, audit); err != nil {
		return nil, err
	}
	ends, err := s.adm.ListEndOffsets(ctx, audit)
	if err != nil {
		return nil, fmt.Errorf("sealer: end offsets of %s: %w", audit, err)
	}
	starts, err := s.adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("sealer: start offsets of %s: %w", topic, err)
	}
	last := map[int32]int64{}
	for p := range ps {
		if o, ok := ends.Lookup(audit, p); ok && o.Err == nil && o.Offset > 0 {
			last[p] = o.Offset - 1
		}
	}
	cps, err := s.readLast(ctx, audit, last)
	if err != nil {
		return nil, err
	}
	out := map[int32]*partState{}
	for p := range ps {
		st := &partState{tenant: tenant, audit: audit, lastWrite: time.Now()}
		cp, ok := cps[p]
		switch {
		case !ok:
			st.chain = auditlog.NewChain(tenant, p)
			if o, ok := starts.Lookup(topic, p); ok && o.Err == nil {
				// continue from the log start: LastOffset+1 is where reading begins
				st.chain = auditlog.NewChainAt(tenant, p, o.Offset)
			}
		default:
			c, err := s.check(cp, tenant, p)
			if err != nil {
				s.metrics.broken.Inc()
				s.cfg.Logger.Error().Err(err).Str("audit_topic", audit).Int32("partition", p).
					Msg("sealer: the last checkpoint of the partition does not verify; the partition is not sealed (docs/audit.md, \"A checkpoint that does not verify\")")
				out[p] = nil
				continue
			}
			st.chain = c
		}
		out[p] = st
	}
	return out, nil
}

// check continues the chain from cp after checking it is the partition's
// and signed by a known key.
func (s *Sealer) check(cp *auditlog.Checkpoint, tenant string, p int32) (*auditlog.Chain, error) {
	if cp.Head.Tenant != tenant || cp.Head.Partition != p {
		return nil, fmt.Errorf("checkpoint of %s/%d in the audit partition of %s/%d", cp.Head.Tenant, cp.Head.Partition, tenant, p)
	}
	if err := cp.CheckSignature(s.cfg.Keys); err != nil {
		return nil, err
	}
	return auditlog.RestoreChain(cp)
}

// readLast reads the record at offset last[p] of each audit partition p.
func (s *Sealer) readLast(ctx context.Context, audit string, last map[int32]int64) (map[int32]*auditlog.Checkpoint, error) {
	out := map[int32]*auditlog.Checkpoint{}
	if len(last) == 0 {
		return out, nil
	}
	at := map[int32]kgo.Offset{}
	for p, o := range last {
		at[p] = kgo.NewOffset().At(o)
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), s.opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{audit: at}))...)
	if err != nil {
		return nil, fmt.Errorf("sealer: audit reader: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for len(out) < len(last) {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("sealer: reading the last checkpoints of %s: %w", audit, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, fmt.Errorf("sealer: reading the last checkpoints of %s: %w", audit, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != last[r.Partition] {
				return
			}
			cp, err := auditlog.ParseCheckpoint(r.Value)
			if err != nil {
				cp = &auditlog.Checkpoint{} // refused by check: wrong tenant
			}
			out[r.Partition] = cp
		})
	}
	return out, nil
}

// ensureAudit creates the audit topic with the events topic's partitions
// (retention forever, or RetentionBytes), or adds the partitions it lacks.
func (s *Sealer) ensureAudit(ctx context.Context, topic, audit string) error {
	forever, del, bytes := "-1", "delete", "-1"
	if s.cfg.RetentionBytes > 0 {
		bytes = strconv.FormatInt(s.cfg.RetentionBytes, 10)
	}
	err := partitioning.EnsureMirror(ctx, s.prod, topic, audit, s.cfg.ReplicationFactor,
		map[string]*string{"retention.ms": &forever, "retention.bytes": &bytes, "cleanup.policy": &del})
	if err != nil {
		return fmt.Errorf("sealer: %w", err)
	}
	return nil
}
