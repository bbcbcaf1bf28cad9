package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/aep-gateway/aep-gateway/partitioning"
)

// What bounds the embedded broker's memory (docs/operations.md). kfake
// serves fetches from its segment files, keeping only a small index per
// batch in memory, but when it starts it reads every segment file whole
// and decodes it, all partitions at once; after a crash (no snapshot) it
// holds a partition's every batch until that partition is loaded. So the
// memory a restart needs grows with the bytes kept, and the bound is a
// byte retention per partition.
const (
	// embeddedRetentionBytes is --topic-retention-bytes -1 on the
	// embedded broker: per partition of a tenant's events topic.
	embeddedRetentionBytes = 16 << 20
	// embeddedLoadFactor is the memory a restart takes per byte kept on
	// disk (measured 1.6-1.8: raw segment plus decoded batches; rounded up).
	embeddedLoadFactor = 2
	// embeddedBaseMemory is the gateway's own memory with no data.
	embeddedBaseMemory = 96 << 20
	// embeddedCleanerEvery is how often retention runs: what is written
	// between two runs comes on top of the bound.
	embeddedCleanerEvery = 15 * time.Second
)

// embeddedLimits are the embedded broker's byte bounds and the memory
// they imply.
type embeddedLimits struct {
	EventsBytes     int64 // retention.bytes per events partition; 0: unbounded
	DeadLetterBytes int64 // retention.bytes per dead-letter partition; 0: unbounded
	AuditBytes      int64 // retention.bytes per audit partition (docs/audit.md); 0: unbounded
	SegmentBytes    int64 // log.segment.bytes
	TenantDisk      int64 // most one tenant's events and dead letters keep on disk; 0: unbounded
	TenantMemory    int64 // memory a restart needs per tenant, on top of embeddedBaseMemory
}

func (c config) embeddedBounds() embeddedLimits {
	r := c.TopicRetentionBytes
	if r < 0 {
		r = embeddedRetentionBytes
	}
	l := embeddedLimits{EventsBytes: r, SegmentBytes: 4 << 20}
	if r == 0 {
		return l
	}
	l.SegmentBytes = min(max(r/4, 1<<20), 64<<20)
	l.DeadLetterBytes = max(r/4, 1<<20)
	// A checkpoint keeps about 80 bytes a record: a quarter of the events'
	// bytes outlives the events of 320-byte records and more.
	l.AuditBytes = l.DeadLetterBytes
	// Retention deletes whole segments only, so a partition keeps up to
	// one more segment than its bound.
	l.TenantDisk = int64(c.TopicPartitions) * (l.EventsBytes + l.DeadLetterBytes + l.AuditBytes + 3*l.SegmentBytes)
	l.TenantMemory = embeddedLoadFactor * l.TenantDisk
	return l
}

// logEmbeddedBounds says at start what bounds the embedded broker's memory.
func (c config) logEmbeddedBounds(log zerolog.Logger) {
	l := c.embeddedBounds()
	if l.EventsBytes == 0 {
		log.Warn().Msg("embedded kafka: --topic-retention-bytes 0, no byte bound: a restart loads every kept byte into memory (about twice the data dir), so memory after a restart grows with the data; docs/operations.md")
		return
	}
	log.Info().Int64("events_bytes_per_partition", l.EventsBytes).Int64("dead_letter_bytes_per_partition", l.DeadLetterBytes).
		Int64("segment_bytes", l.SegmentBytes).Int("partitions", c.TopicPartitions).
		Int64("tenant_disk_bytes", l.TenantDisk).Int64("restart_memory_bytes_per_tenant", l.TenantMemory).
		Int64("base_memory_bytes", embeddedBaseMemory).
		Msgf("embedded kafka: each tenant keeps at most %d MiB on disk (plus what is written in %v between retention runs); a restart needs about %d MiB + %d MiB per tenant of memory; docs/operations.md",
			l.TenantDisk>>20, embeddedCleanerEvery, embeddedBaseMemory>>20, l.TenantMemory>>20)
}

// resumeCleaner restarts kfake's retention and compaction after it loaded
// a data dir: kfake starts its cleaner only when a topic is created or a
// config altered, not after loading, so a restarted broker would keep
// every byte until then. Setting a broker config (to the value it has)
// starts it.
func (b *embeddedBroker) resumeCleaner() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v := strconv.FormatInt(embeddedCleanerEvery.Milliseconds(), 10)
	resp, err := b.adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "log.cleaner.backoff.ms", Value: &v}})
	if err != nil {
		return err
	}
	for _, r := range resp {
		if r.Err != nil {
			return fmt.Errorf("%w (%s)", r.Err, r.ErrMessage)
		}
	}
	return nil
}

// alignRetention gives the tenant events and dead-letter topics found
// unbounded (retention.bytes -1: made before the embedded byte bound, or
// with --topic-retention-bytes 0) the bound of embeddedBounds, so that a
// data dir carried over from such a run stops growing and the next
// restart fits the stated memory. Topics with a bound of their own are
// left alone; with no bound configured nothing is changed.
func (b *embeddedBroker) alignRetention(c config, n partitioning.Naming) error {
	l := c.embeddedBounds()
	if l.EventsBytes == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topics, err := b.adm.ListTopics(ctx)
	if err != nil {
		return err
	}
	want := map[string]int64{}
	for _, t := range topics.Names() {
		switch {
		case isEventsTopic(n, t):
			want[t] = l.EventsBytes
		case isEventsTopic(n, strings.TrimSuffix(t, ".deadletter")) && strings.HasSuffix(t, ".deadletter"):
			want[t] = l.DeadLetterBytes
		case isEventsTopic(n, strings.TrimSuffix(t, ".audit")) && strings.HasSuffix(t, ".audit"):
			want[t] = l.AuditBytes
		}
	}
	if len(want) == 0 {
		return nil
	}
	rcs, err := b.adm.DescribeTopicConfigs(ctx, slices.Sorted(maps.Keys(want))...)
	if err != nil {
		return err
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			continue
		}
		unbounded := true
		for _, cf := range rc.Configs {
			if cf.Key == "retention.bytes" && cf.Value != nil && *cf.Value != "-1" {
				unbounded = false
			}
		}
		if !unbounded {
			continue
		}
		v := strconv.FormatInt(want[rc.Name], 10)
		resp, err := b.adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.bytes", Value: &v}}, rc.Name)
		if err == nil {
			err = resp[0].Err
		}
		if err != nil {
			return fmt.Errorf("topic %s: %w", rc.Name, err)
		}
		b.log.Warn().Str("topic", rc.Name).Str("retention_bytes", v).
			Msg("embedded kafka: unbounded tenant topic given the embedded byte bound (--topic-retention-bytes 0 keeps topics unbounded); older events beyond it are deleted at the next retention run")
	}
	return nil
}

// isEventsTopic says whether topic is a tenant's events topic under n.
func isEventsTopic(n partitioning.Naming, topic string) bool {
	tmpl := n.Template
	if tmpl == "" {
		tmpl = partitioning.DefaultTopicTemplate
	}
	pre, suf, _ := strings.Cut(tmpl, "{tenant}")
	tenant, ok := strings.CutPrefix(topic, pre)
	if !ok || !strings.HasSuffix(tenant, suf) {
		return false
	}
	tenant = strings.TrimSuffix(tenant, suf)
	return partitioning.ValidateTenant(tenant) == nil && n.Events(tenant) == topic
}
