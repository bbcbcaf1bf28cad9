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
