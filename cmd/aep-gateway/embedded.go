package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/aep-gateway/aep-gateway/internal/segrepair"
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
// mark is padded back to it with empty records (pad); when that cannot be
// done it is logged loudly, and Reused reports the offsets that may have
// been handed out before, so ingest responses say so.
type embeddedBroker struct {
	cluster *kfake.Cluster
	addr    string
	dir     string
	log     zerolog.Logger
	adm     *kadm.Client
	admCl   *kgo.Client

	resets map[string]map[int32]int64 // topic -> partition -> journaled HWM; read-only after start
	damage []segrepair.Damage         // found in the segments at start; read-only

	quit      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

const journalEvery = 2 * time.Second

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
	// Before kfake loads the segments: it would truncate a partition at
	// its first damaged batch and drop every intact one after it.
	damage, rerr := segrepair.Repair(filepath.Join(c.DataDir, "kafka"), filepath.Join(c.DataDir, "damaged"))
	if rerr != nil {
		log.Error().Err(rerr).Msg("embedded kafka: segment check failed; the broker loads what it can")
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
		cluster: cluster, addr: cluster.ListenAddrs()[0], dir: c.DataDir, log: log, damage: damage,
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
	b.reportDamage()
	if err := b.checkJournal(); err != nil {
		log.Error().Err(err).Msg("embedded kafka: could not check the offsets journal")
	}
	go b.journalLoop()
	return b, nil
}

func (b *embeddedBroker) journalPath() string { return filepath.Join(b.dir, "offsets.json") }

// highWatermarks lists every partition's end offset.
func (b *embeddedBroker) highWatermarks(ctx context.Context) (map[string]map[int32]int64, error) {
	names, err := b.topicNames(ctx)
	if err != nil || len(names) == 0 {
		return map[string]map[int32]int64{}, err
	}
	ends, err := b.adm.ListEndOffsets(ctx, names...)
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

// topicNames lists every topic of the broker with a metadata request for
// all topics. (kadm's ListTopics answers an empty list against kfake, which
// left the offsets journal empty: TestEmbeddedRestartNeverReusesOffsets.)
func (b *embeddedBroker) topicNames(ctx context.Context) ([]string, error) {
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, b.admCl)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	names := make([]string, 0, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic != nil && t.ErrorCode == 0 {
			names = append(names, *t.Topic)
		}
	}
	return names, nil
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
			if !ok || cur >= old {
				continue
			}
			err := b.pad(topic, p, old-cur)
			if err == nil {
				b.log.Warn().Str("topic", topic).Int32("partition", p).Int64("journaled_end", old).Int64("end", cur).
					Msg("embedded kafka: partition restarted below offsets already handed out (emptied by retention before a crash); padded back to journaled_end with empty records (key aep-gateway:padding), so no offset is handed out twice")
				continue
			}
			if b.resets[topic] == nil {
				b.resets[topic] = map[int32]int64{}
			}
			b.resets[topic][p] = old
			b.log.Error().Err(err).Str("topic", topic).Int32("partition", p).Int64("journaled_end", old).Int64("end", cur).
				Msg("embedded kafka: partition restarted below offsets already handed out (emptied by retention before a crash) and could not be padded; offsets below journaled_end are reused and flagged reused_offset in ingest responses")
		}
	}
	return nil
}

// maxPad bounds the records pad writes for one partition (at about 10
// bytes each, compressed in batches: seconds at start for the largest).
const maxPad = 10_000_000

// pad appends n empty records (no value, no headers: every reader skips
// them) to a partition that came back below offsets it had handed out,
// so that the next record gets the next offset never used.
func (b *embeddedBroker) pad(topic string, p int32, n int64) error {
	if n > maxPad {
		return fmt.Errorf("%d offsets to pad, more than %d", n, maxPad)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.ZstdCompression()), kgo.ProducerLinger(0))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	key := []byte("aep-gateway:padding")
	const chunk = 10_000
	rs := make([]*kgo.Record, 0, chunk)
	for n > 0 {
		rs = rs[:0]
		for i := int64(0); i < min(n, chunk); i++ {
			rs = append(rs, &kgo.Record{Topic: topic, Partition: p, Key: key})
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			return fmt.Errorf("pad %s/%d: %w", topic, p, err)
		}
		n -= int64(len(rs))
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

// reportDamage logs what segrepair found at start: each damaged run with
// the offsets that were lost and where its bytes went, and torn tails.
func (b *embeddedBroker) reportDamage() {
	for _, d := range b.damage {
		if d.Torn || d.Lost() == 0 {
			b.log.Warn().Str("topic", d.Topic).Int32("partition", d.Partition).Str("segment", d.Segment).Int("bytes", d.Bytes).
				Msg("embedded kafka: incomplete bytes at the end of a partition (a crash mid-write) or between batches; dropped, no acknowledged record lost")
			continue
		}
		b.log.Error().Str("topic", d.Topic).Int32("partition", d.Partition).Str("segment", d.Segment).
			Int64("first_offset", d.FirstOffset).Int64("last_offset", d.LastOffset).Int("bytes", d.Bytes).Str("quarantine", d.Quarantine).
			Msg("embedded kafka: damaged record batch on disk; its offsets now hold empty records (those events are lost), every intact record after it is kept, the damaged bytes are in quarantine")
	}
}

// LastError implements gateway.ProvisioningReporter: damage found at start
// does not make the node unready (Warnings lists it).
func (b *embeddedBroker) LastError() error { return nil }

// Warnings implements gateway.TopicWarner: /readyz lists the damaged runs
// found at start, so an operator sees that events were lost.
func (b *embeddedBroker) Warnings() []string {
	var out []string
	for _, d := range b.damage {
		if d.Lost() > 0 {
			out = append(out, fmt.Sprintf("embedded kafka: %s partition %d offsets %d-%d were damaged on disk and are lost (bytes in %s)",
				d.Topic, d.Partition, d.FirstOffset, d.LastOffset, d.Quarantine))
		}
	}
	return out
}

// damageMetrics are the gauges of what segrepair found at start.
func (b *embeddedBroker) damageMetrics() []prometheus.Collector {
	var runs, lost float64
	for _, d := range b.damage {
		if d.Lost() > 0 {
			runs++
			lost += float64(d.Lost())
		}
	}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "aep_embedded_damaged_batches",
			Help: "Damaged record batches found in the embedded broker's segment files at start and replaced by empty records"}, func() float64 { return runs }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "aep_embedded_damaged_offsets",
			Help: "Offsets of the embedded broker whose records were damaged on disk at start (events lost, now empty records)"}, func() float64 { return lost }),
	}
}
