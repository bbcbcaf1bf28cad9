package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/partitioning"
)

// embeddedBroker is the single-node Kafka-protocol broker (kfake) the gateway
// runs when no cluster is configured. Data lives under dir/kafka.
//
// kfake rebuilds a partition's high watermark from its segments after a
// crash, so a partition emptied by retention comes back at offset 0 and
// would hand out offsets again. The broker therefore journals every
// partition's high watermark (dir/offsets.json, every journalEvery and at
// close) and, at start, compares: a partition found below its journaled
// mark is logged loudly, and Reused reports the offsets that may have been
// handed out before, so ingest responses say so.
type embeddedBroker struct {
	cluster *kfake.Cluster
	addr    string
	dir     string
	log     zerolog.Logger
	adm     *kadm.Client
	admCl   *kgo.Client

	resets map[string]map[int32]int64 // topic -> partition -> journaled HWM; read-only after start

	quit      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

const journalEvery = 2 * time.Second

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
	// Retention deletes whole segments only, so a partition keeps up to
	// one more segment than its bound.
	l.TenantDisk = int64(c.TopicPartitions) * (l.EventsBytes + l.DeadLetterBytes + 2*l.SegmentBytes)
	l.TenantMemory = embeddedLoadFactor * l.TenantDisk
	return l
}

// logBounds says at start what bounds the embedded broker's memory.
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

func startEmbedded(c config, log zerolog.Logger) (*embeddedBroker, error) {
	host, portStr, err := net.SplitHostPort(c.EmbeddedKafkaListen)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("embedded kafka port %q: %w", portStr, err)
	}
	if err := privateDataDir(c.DataDir); err != nil {
		return nil, err
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.ListenFn(func(network, addr string) (net.Listener, error) {
			_, p, _ := net.SplitHostPort(addr)
			ln, err := net.Listen(network, net.JoinHostPort(host, p))
			if err != nil {
				return nil, err
			}
			// kfake's accept loop returns on its first error; this one
			// backs off and keeps accepting (docs/security.md).
			return persistentListener(ln, log), nil
		}),
		kfake.ClusterID("aep-gateway-embedded"),
		kfake.DataDir(filepath.Join(c.DataDir, "kafka")),
		// kfake runs retention only on topics that carry retention configs
		// (the provisioner sets them) and its cleaner backs off an hour by
		// default; 15 s keeps the replay window and the byte bound honest.
		// Small segments: kfake reads a segment whole when it loads it,
		// and deletes only segments that retention emptied entirely.
		kfake.BrokerConfigs(map[string]string{
			"log.cleaner.backoff.ms": strconv.FormatInt(embeddedCleanerEvery.Milliseconds(), 10),
			"log.segment.bytes":      strconv.FormatInt(c.embeddedBounds().SegmentBytes, 10),
		}),
		kfake.WithLogger(kfakeLogger{log}),
	}
	if c.EmbeddedSyncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	cluster, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start embedded kafka: %w", err)
	}
	b := &embeddedBroker{
		cluster: cluster, addr: cluster.ListenAddrs()[0], dir: c.DataDir, log: log,
		resets: map[string]map[int32]int64{}, quit: make(chan struct{}), done: make(chan struct{}),
	}
	b.admCl, err = kgo.NewClient(kgo.SeedBrokers(b.addr))
	if err != nil {
		cluster.Close()
		return nil, err
	}
	b.adm = kadm.NewClient(b.admCl)
	if err := b.resumeCleaner(); err != nil {
		log.Error().Err(err).Msg("embedded kafka: retention not restarted after loading the data dir; it resumes when a topic is created")
	}
	if err := b.alignRetention(c, partitioning.Naming{Template: c.TopicTemplate}); err != nil {
		log.Error().Err(err).Msg("embedded kafka: could not apply the byte bound to existing tenant topics")
	}
	if err := b.checkJournal(); err != nil {
		log.Error().Err(err).Msg("embedded kafka: could not check the offsets journal")
	}
	go b.journalLoop()
	return b, nil
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

func (b *embeddedBroker) journalPath() string { return filepath.Join(b.dir, "offsets.json") }

// highWatermarks lists every partition's end offset.
func (b *embeddedBroker) highWatermarks(ctx context.Context) (map[string]map[int32]int64, error) {
	topics, err := b.adm.ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	ends, err := b.adm.ListEndOffsets(ctx, topics.Names()...)
	if err != nil {
		return nil, err
	}
	out := map[string]map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return
		}
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]int64{}
		}
		out[o.Topic][o.Partition] = o.Offset
	})
	return out, nil
}

func (b *embeddedBroker) checkJournal() error {
	raw, err := os.ReadFile(b.journalPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var saved map[string]map[int32]int64
	if err := json.Unmarshal(raw, &saved); err != nil {
		return fmt.Errorf("offsets journal: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now, err := b.highWatermarks(ctx)
	if err != nil {
		return err
	}
	for topic, parts := range saved {
		for p, old := range parts {
			cur, ok := now[topic][p]
			if ok && cur < old {
				if b.resets[topic] == nil {
					b.resets[topic] = map[int32]int64{}
				}
				b.resets[topic][p] = old
				b.log.Error().Str("topic", topic).Int32("partition", p).Int64("journaled_end", old).Int64("end", cur).
					Msg("embedded kafka: partition restarted below offsets already handed out (emptied by retention before a crash); offsets below journaled_end are reused and flagged reused_offset in ingest responses")
			}
		}
	}
	return nil
}

// Reused implements gateway.OffsetAuditor.
func (b *embeddedBroker) Reused(topic string, partition int32, offset int64) bool {
	old, ok := b.resets[topic][partition]
	return ok && offset < old
}

func (b *embeddedBroker) saveJournal() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hw, err := b.highWatermarks(ctx)
	if err != nil {
		return err
	}
	// Never lower a journaled mark: after a reset the journal keeps the
	// old end until the partition passes it.
	for topic, parts := range b.resets {
		for p, old := range parts {
			if hw[topic] != nil && hw[topic][p] < old {
				hw[topic][p] = old
			}
		}
	}
	raw, err := json.Marshal(hw)
	if err != nil {
		return err
	}
	tmp := b.journalPath() + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, b.journalPath())
}

func (b *embeddedBroker) journalLoop() {
	defer close(b.done)
	t := time.NewTicker(journalEvery)
	defer t.Stop()
	for {
		select {
		case <-b.quit:
			return
		case <-t.C:
			if err := b.saveJournal(); err != nil {
				b.log.Warn().Err(err).Msg("embedded kafka: offsets journal not saved")
			}
		}
	}
}

// Addr is the broker's Kafka address.
func (b *embeddedBroker) Addr() string { return b.addr }

// Close journals the offsets once more and stops the broker. Idempotent.
func (b *embeddedBroker) Close() {
	b.closeOnce.Do(func() {
		close(b.quit)
		<-b.done
		if err := b.saveJournal(); err != nil {
			b.log.Warn().Err(err).Msg("embedded kafka: offsets journal not saved at close")
		}
		b.admCl.Close()
		b.cluster.Close()
	})
}

type kfakeLogger struct{ log zerolog.Logger }

func (l kfakeLogger) Logf(level kfake.LogLevel, msg string, args ...any) {
	switch level {
	case kfake.LogLevelError:
		l.log.Error().Str("component", "embedded-kafka").Msgf(msg, args...)
	case kfake.LogLevelWarn:
		l.log.Warn().Str("component", "embedded-kafka").Msgf(msg, args...)
	}
}
