package main

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A partition emptied by retention comes back at offset 0 after a crash
// (kfake rebuilds its end from the segments left): the broker must not
// hand those offsets out again. Simulated by removing the partition's
// segments between two runs on one data dir; the restarted broker pads the
// partition back to its journaled end, so the next record gets the next
// offset, none is reported reused, and a reader from the start finds only
// the padding (no AEP record) before it.
func TestEmbeddedRestartNeverReusesOffsets(t *testing.T) {
	dir := t.TempDir()
	cfg, err := parseConfig([]string{"--data-dir", dir, "--embedded-kafka-listen", "127.0.0.1:0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	log := zerolog.New(io.Discard)
	const topic, n = "aep.pad.events", 500
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	b1, err := startEmbedded(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b1.adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	produceN(ctx, t, b1.addr, topic, n, "before")
	b1.Close() // journals the end: 500
	// Retention emptied the partition, then a crash: no segment is left.
	removed := 0
	_ = filepath.WalkDir(filepath.Join(dir, "kafka"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(p, topic) && filepath.Ext(p) != ".json" {
			if os.Remove(p) == nil {
				removed++
			}
		}
		return nil
	})
	if removed == 0 {
		t.Fatal("no segment of the partition found to remove")
	}

	b2, err := startEmbedded(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	off := produceN(ctx, t, b2.addr, topic, 1, "after")
	if off < n || b2.Reused(topic, 0, off) {
		t.Fatalf("first record after the restart at offset %d (reused %v), want %d or more: offsets were handed out again", off, b2.Reused(topic, 0, off), n)
	}
	// Only padding below it: no record with a value.
	cl, err := kgo.NewClient(kgo.SeedBrokers(b2.addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("the new record was never read back")
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			switch {
			case r.Offset == off:
				if string(r.Value) != "after-0" {
					t.Fatalf("offset %d holds %q", off, r.Value)
				}
				done = true
			case len(r.Value) > 0 || len(r.Headers) > 0:
				t.Fatalf("offset %d below the new record holds %q: not padding", r.Offset, r.Value)
			}
		})
		if done {
			return
		}
	}
}

// produceN writes n records (values prefix-0..) to partition 0 of topic and
// returns the last one's offset.
func produceN(ctx context.Context, t *testing.T, addr, topic string, n int, prefix string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Value: []byte(prefix + "-" + strconv.Itoa(i))}
	}
	res := cl.ProduceSync(ctx, rs...)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	return res[len(res)-1].Record.Offset
}

// BenchmarkEmbeddedPad: what padding a partition back costs at start, per
// 100,000 offsets.
func BenchmarkEmbeddedPad(b *testing.B) {
	cfg, err := parseConfig([]string{"--data-dir", b.TempDir(), "--embedded-kafka-listen", "127.0.0.1:0"}, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	eb, err := startEmbedded(cfg, zerolog.New(io.Discard))
	if err != nil {
		b.Fatal(err)
	}
	defer eb.Close()
	const topic = "aep.padbench.events"
	if _, err := eb.adm.CreateTopic(context.Background(), 1, 1, nil, topic); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if err := eb.pad(topic, 0, 100_000); err != nil {
			b.Fatal(err)
		}
	}
}

// The gateway's embedded broker repairs a damaged segment before it loads
// it (internal/segrepair), and says so: /readyz warnings name the lost
// offsets, the gauges count them, every intact record is read back.
func TestEmbeddedDamagedSegmentReported(t *testing.T) {
	dir := t.TempDir()
	cfg, err := parseConfig([]string{"--data-dir", dir, "--embedded-kafka-listen", "127.0.0.1:0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	const topic = "aep.dmg.events"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b1, err := startEmbedded(cfg, zerolog.New(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b1.adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		produceN(ctx, t, b1.addr, topic, 20, "r")
	}
	b1.Close()
	seg := filepath.Join(dir, "kafka", "partitions", topic+"-0", "0.dat")
	raw, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(raw) / 2; i < len(raw)/2+16; i++ {
		raw[i] ^= 0xff
	}
	if err := os.WriteFile(seg, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	b2, err := startEmbedded(cfg, zerolog.New(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	ws := b2.Warnings()
	if len(ws) != 1 || !strings.Contains(ws[0], topic+" partition 0 offsets ") || !strings.Contains(ws[0], filepath.Join(dir, "damaged")) {
		t.Fatalf("/readyz warnings %q, want the damaged offsets and the quarantine", ws)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(b2.damageMetrics()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
	}
	lost := b2.damage[0].Lost()
	if got["aep_embedded_damaged_batches"] != 1 || got["aep_embedded_damaged_offsets"] != float64(lost) || lost < 1 || lost >= 200 {
		t.Fatalf("gauges %v, want 1 batch and %d offsets", got, lost)
	}
	if off := produceN(ctx, t, b2.addr, topic, 1, "after"); off != 200 {
		t.Fatalf("next record at offset %d, want 200: the intact records after the damage were dropped", off)
	}
}
