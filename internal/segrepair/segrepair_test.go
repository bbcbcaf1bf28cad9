package segrepair_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/aep-gateway/aep-gateway/internal/segrepair"
)

const topic = "aep.damage.events"

func startBroker(t *testing.T, dir string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(dir), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// produceBatches writes batches of per records each (one ProduceSync per
// batch: one record batch each), values "v<offset>".
func produceBatches(ctx context.Context, t *testing.T, c *kfake.Cluster, from, batches, per int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	n := from
	for range batches {
		rs := make([]*kgo.Record, per)
		for i := range rs {
			rs[i] = &kgo.Record{Value: fmt.Appendf(nil, "v%d", n)}
			n++
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// readAll reads the partition from its start to its end.
func readAll(ctx context.Context, t *testing.T, c *kfake.Cluster) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kgoEnd(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var out []*kgo.Record
	for int64(len(out)) < ends {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records", len(out), ends)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

func kgoEnd(ctx context.Context, c *kfake.Cluster) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	req := kmsgListEnd()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	return resp.Topics[0].Partitions[0].Offset, nil
}

// 16 bytes flipped in the middle of a partition's segment (the issue's
// case): the broker alone truncates the file there and loses every intact
// batch after it; repaired first, it keeps every record but the damaged
// batch's, whose offsets hold empty records with the filler key, the
// damaged bytes are quarantined and reported with their offsets, and the
// next record gets the next offset.
func TestRepairKeepsEveryIntactRecordAfterTheDamage(t *testing.T) {
	for _, repair := range []bool{false, true} {
		t.Run(fmt.Sprintf("repair=%v", repair), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			dir := t.TempDir()
			c := startBroker(t, dir)
			produceBatches(ctx, t, c, 0, 20, 10) // 200 records, 20 batches
			c.Close()

			seg := filepath.Join(dir, "partitions", topic+"-0", "0.dat")
			raw, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			mid := len(raw) / 2
			for i := mid; i < mid+16; i++ {
				raw[i] ^= 0xff
			}
			if err := os.WriteFile(seg, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			var damage []segrepair.Damage
			if repair {
				if damage, err = segrepair.Repair(dir, filepath.Join(t.TempDir(), "q")); err != nil {
					t.Fatal(err)
				}
			}
			c = startBroker(t, dir)
			defer c.Close()
			rs := readAll(ctx, t, c)
			if !repair {
				if len(rs) >= 190 {
					t.Fatalf("without repair %d records came back; the broker's truncation was expected to lose the tail", len(rs))
				}
				t.Logf("without repair: %d of 200 records after the restart", len(rs))
				return
			}
			if len(damage) != 1 || damage[0].Lost() < 1 || damage[0].Lost() > 20 || damage[0].Quarantine == "" {
				t.Fatalf("damage %+v, want one damaged run of one or two batches, quarantined", damage)
			}
			d := damage[0]
			if q, err := os.ReadFile(d.Quarantine); err != nil || len(q) != d.Bytes {
				t.Fatalf("quarantine %s: %d bytes (%v), want %d", d.Quarantine, len(q), err, d.Bytes)
			}
			if len(rs) != 200 {
				t.Fatalf("%d records after the repair, want all 200 offsets", len(rs))
			}
			for i, r := range rs {
				damaged := int64(i) >= d.FirstOffset && int64(i) <= d.LastOffset
				switch {
				case r.Offset != int64(i):
					t.Fatalf("record %d at offset %d", i, r.Offset)
				case damaged && (string(r.Key) != segrepair.FillerKey || r.Value != nil):
					t.Fatalf("offset %d in the damaged run holds %q=%q, want the filler", i, r.Key, r.Value)
				case !damaged && string(r.Value) != fmt.Sprintf("v%d", i):
					t.Fatalf("intact offset %d holds %q", i, r.Value)
				}
			}
			produceBatches(ctx, t, c, 200, 1, 1)
			if rs := readAll(ctx, t, c); len(rs) != 201 || string(rs[200].Value) != "v200" {
				t.Fatalf("after the repair the next record is not at offset 200")
			}
			t.Logf("damage %+v: %d offsets filled, %d kept", d, d.Lost(), 200-d.Lost())
		})
	}
}

func kmsgListEnd() *kmsg.ListOffsetsRequest {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// batchStart is the byte where batch k of a segment starts.
func batchStart(raw []byte, k int) int {
	at := 0
	for range k {
		at += 12 + int(binary.BigEndian.Uint32(raw[at+8:at+12]))
	}
	return at
}

// Damage to a batch's header (its offset and length: the scan must find
// the next batch byte by byte) and a torn tail (a crash mid-append: left
// to the broker, reported as torn, nothing before it lost).
func TestRepairHeaderDamageAndTornTail(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	c := startBroker(t, dir)
	produceBatches(ctx, t, c, 0, 20, 10)
	c.Close()
	seg := filepath.Join(dir, "partitions", topic+"-0", "0.dat")
	raw, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	tail := batchStart(raw, 0)
	for { // the last batch's first offset
		next := tail + 12 + int(binary.BigEndian.Uint32(raw[tail+8:tail+12]))
		if next >= len(raw) {
			break
		}
		tail = next
	}
	tornFrom := int64(binary.BigEndian.Uint64(raw[tail : tail+8]))
	at := batchStart(raw, 5)
	first := int64(binary.BigEndian.Uint64(raw[at : at+8]))
	last := first + int64(binary.BigEndian.Uint32(raw[at+23:at+27]))
	for i := at; i < at+12; i++ {
		raw[i] ^= 0x5a
	}
	raw = raw[:len(raw)-7] // the last batch torn
	if err := os.WriteFile(seg, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	damage, err := segrepair.Repair(dir, filepath.Join(t.TempDir(), "q"))
	if err != nil {
		t.Fatal(err)
	}
	if len(damage) != 2 || damage[0].FirstOffset != first || damage[0].LastOffset != last || !damage[1].Torn || damage[1].Lost() != 0 {
		t.Fatalf("damage %+v, want offsets %d..%d filled and a torn tail", damage, first, last)
	}
	c = startBroker(t, dir)
	defer c.Close()
	rs := readAll(ctx, t, c)
	if int64(len(rs)) != tornFrom {
		t.Fatalf("%d records, want %d (the torn last batch is gone, as after any crash mid-write)", len(rs), tornFrom)
	}
	for i, r := range rs {
		if filled := int64(i) >= first && int64(i) <= last; filled != (string(r.Key) == segrepair.FillerKey) || (!filled && string(r.Value) != fmt.Sprintf("v%d", i)) {
			t.Fatalf("offset %d: %q=%q", r.Offset, r.Key, r.Value)
		}
	}
}

// BenchmarkRepairIntact: what the check costs at every start when nothing
// is damaged (it reads and checksums every segment), per MiB kept.
func BenchmarkRepairIntact(b *testing.B) {
	dir := b.TempDir()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(dir), kfake.SeedTopics(4, topic))
	if err != nil {
		b.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		b.Fatal(err)
	}
	val := make([]byte, 1024)
	const mib = 32
	rs := make([]*kgo.Record, 0, 1024)
	for range mib {
		rs = rs[:0]
		for range 1024 {
			rs = append(rs, &kgo.Record{Value: val})
		}
		if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	cl.Close()
	c.Close()
	b.SetBytes(mib << 20)
	b.ResetTimer()
	for range b.N {
		if d, err := segrepair.Repair(dir, b.TempDir()); err != nil || len(d) != 0 {
			b.Fatalf("%v %v", d, err)
		}
	}
}

// Damage that runs to the end of a sealed segment (not the partition's
// last): its offsets end where the next segment begins, so the filler
// covers exactly up to it and every later segment is kept whole.
func TestRepairDamageToTheEndOfASealedSegment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	start := func() *kfake.Cluster {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(dir), kfake.SeedTopics(1, topic),
			kfake.BrokerConfigs(map[string]string{"log.segment.bytes": "2048"}))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := start()
	produceBatches(ctx, t, c, 0, 40, 10)
	c.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, "partitions", topic+"-0", "*.dat"))
	if len(segs) < 3 {
		t.Fatalf("%d segments, want several (log.segment.bytes 2048)", len(segs))
	}
	// The first segment (base 0): damage its second half, to its end.
	first := filepath.Join(dir, "partitions", topic+"-0", "0.dat")
	raw, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	cut := batchStart(raw, 1)
	from := int64(binary.BigEndian.Uint64(raw[cut : cut+8]))
	for i := cut; i < len(raw); i++ {
		raw[i] ^= 0xa5
	}
	if err := os.WriteFile(first, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	damage, err := segrepair.Repair(dir, filepath.Join(t.TempDir(), "q"))
	if err != nil {
		t.Fatal(err)
	}
	if len(damage) != 1 || damage[0].FirstOffset != from || damage[0].Torn {
		t.Fatalf("damage %+v, want one run from offset %d to the next segment", damage, from)
	}
	c = start()
	defer c.Close()
	rs := readAll(ctx, t, c)
	if len(rs) != 400 {
		t.Fatalf("%d records after the repair, want all 400 offsets (later segments whole)", len(rs))
	}
	for i, r := range rs {
		filled := int64(i) >= damage[0].FirstOffset && int64(i) <= damage[0].LastOffset
		if filled != (string(r.Key) == segrepair.FillerKey) || (!filled && string(r.Value) != fmt.Sprintf("v%d", i)) {
			t.Fatalf("offset %d: %q=%q (damage %+v)", r.Offset, r.Key, r.Value, damage[0])
		}
	}
}
