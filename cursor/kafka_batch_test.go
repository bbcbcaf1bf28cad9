package cursor

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// scanState is a client of opts and topic's TopicState.
func scanState(tb testing.TB, opts []kgo.Opt, topic string) (*kgo.Client, TopicState) {
	tb.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	st, err := LoadTopicState(context.Background(), kadm.NewClient(cl), topic)
	if err != nil {
		tb.Fatal(err)
	}
	return cl, st
}

// randomRecords are records with what a batch can hold: nil and empty keys
// and values, no headers or several (a nil header value among them), and
// sizes from a few bytes to a few KiB.
func randomRecords(r *rand.Rand, topic string, n int) []*kgo.Record {
	blob := func() []byte {
		switch r.IntN(5) {
		case 0:
			return nil
		case 1:
			return []byte{}
		default:
			b := make([]byte, r.IntN(3000))
			for i := range b {
				b[i] = byte('a' + r.IntN(26))
			}
			return b
		}
	}
	out := make([]*kgo.Record, n)
	for i := range out {
		rec := &kgo.Record{Topic: topic, Partition: 0, Key: blob(), Value: blob()}
		for h := range r.IntN(5) {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: fmt.Sprintf("h%d", h), Value: blob()})
		}
		out[i] = rec
	}
	return out
}

// TestBatchReaderMatchesProcessFetchPartition: for every compression codec,
// scanning a partition from any offset passes fn the same records (offset,
// key, value, headers, timestamp), in the same order, as decoding each
// fetch with kgo.ProcessFetchPartition, over fetches small enough to end
// mid-batch.
func TestBatchReaderMatchesProcessFetchPartition(t *testing.T) {
	codecs := map[string]kgo.CompressionCodec{
		"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}
	for name, codec := range codecs {
		t.Run(name, func(t *testing.T) {
			topic := "batch." + name
			_, opts := newCluster(t, map[string]int32{topic: 1})
			prod, err := kgo.NewClient(append(append([]kgo.Opt{}, opts...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
				kgo.ProducerBatchCompression(codec), kgo.ProducerBatchMaxBytes(64<<10), kgo.ProducerLinger(0))...)
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			r := rand.New(rand.NewPCG(7, uint64(len(name))))
			for range 6 { // several produce calls: batches of different sizes
				recs := randomRecords(r, topic, 1+r.IntN(400))
				if err := prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			cl, st := scanState(t, opts, topic)
			end := st.End[0]
			want := decodeAll(t, cl, &st, end)
			if int64(len(want)) != end {
				t.Fatalf("reference decoded %d records, want %d", len(want), end)
			}
			sc := newScanner(cl, 16<<10)
			if rp, err := sc.fetch(context.Background(), &st, 0, 0); err != nil || !plainBatches(rp) {
				t.Fatalf("the produced batches are not read in place (err %v)", err)
			}
			for _, from := range []int64{0, 1, end / 3, end/2 + 1, end - 1} {
				var got []kgo.Record
				n, err := sc.scan(context.Background(), &st, 0, from, end, func(rec *kgo.Record) bool {
					c := *rec
					c.Key, c.Value = bytes.Clone(rec.Key), bytes.Clone(rec.Value)
					c.Headers = nil
					for _, h := range rec.Headers {
						c.Headers = append(c.Headers, kgo.RecordHeader{Key: h.Key, Value: bytes.Clone(h.Value)})
					}
					got = append(got, c)
					return true
				})
				if err != nil {
					t.Fatalf("scan from %d: %v", from, err)
				}
				if n != len(got) || int64(n) != end-from {
					t.Fatalf("scan from %d: %d records (%d counted), want %d", from, len(got), n, end-from)
				}
				for i := range got {
					if d := recordDiff(&got[i], want[from+int64(i)]); d != "" {
						t.Fatalf("scan from %d, record %d: %s", from, from+int64(i), d)
					}
				}
			}
			// Stopping early: fn returning false ends the scan there.
			n, err := sc.scan(context.Background(), &st, 0, 0, end, func(rec *kgo.Record) bool { return rec.Offset < 10 })
			if err != nil || n != 11 {
				t.Fatalf("stopped scan: %d records, %v; want 11", n, err)
			}
		})
	}
}

// decodeAll reads the whole partition with ProcessFetchPartition.
func decodeAll(t *testing.T, cl *kgo.Client, st *TopicState, end int64) []*kgo.Record {
	t.Helper()
	sc := newScanner(cl, 1<<20)
	var out []*kgo.Record
	for from := int64(0); from < end; {
		rp, err := sc.fetch(context.Background(), st, 0, from)
		if err != nil {
			t.Fatal(err)
		}
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: from, IsolationLevel: kgo.ReadCommitted(),
			Topic: st.Topic, Partition: 0}, rp, sc.decomp, nil)
		if fp.Err != nil || next <= from {
			t.Fatalf("reference fetch at %d: %v (next %d)", from, fp.Err, next)
		}
		for _, r := range fp.Records {
			if r.Offset >= from {
				out = append(out, r)
			}
		}
		from = next
	}
	return out
}

func recordDiff(got, want *kgo.Record) string {
	switch {
	case got.Offset != want.Offset:
		return fmt.Sprintf("offset %d, want %d", got.Offset, want.Offset)
	case !bytes.Equal(got.Key, want.Key) || (got.Key == nil) != (want.Key == nil):
		return fmt.Sprintf("key %q, want %q", got.Key, want.Key)
	case !bytes.Equal(got.Value, want.Value) || (got.Value == nil) != (want.Value == nil):
		return fmt.Sprintf("value of %d bytes, want %d", len(got.Value), len(want.Value))
	case !got.Timestamp.Equal(want.Timestamp):
		return fmt.Sprintf("timestamp %v, want %v", got.Timestamp, want.Timestamp)
	case len(got.Headers) != len(want.Headers):
		return fmt.Sprintf("%d headers, want %d", len(got.Headers), len(want.Headers))
	}
	for i := range got.Headers {
		g, w := got.Headers[i], want.Headers[i]
		if g.Key != w.Key || !bytes.Equal(g.Value, w.Value) || (g.Value == nil) != (w.Value == nil) {
			return fmt.Sprintf("header %d %q=%q, want %q=%q", i, g.Key, g.Value, w.Key, w.Value)
		}
	}
	return ""
}

// TestScanTransactionalFallsBack: a partition written by a transactional
// producer (commit markers, one aborted transaction) is not plain; the scan
// reads it through ProcessFetchPartition and passes only committed records.
func TestScanTransactionalFallsBack(t *testing.T) {
	const topic = "batch.txn"
	_, opts := newCluster(t, map[string]int32{topic: 1})
	prod, err := kgo.NewClient(append(append([]kgo.Opt{}, opts...), kgo.TransactionalID("scan-test"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx := context.Background()
	write := func(commit bool, vals ...string) {
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := prod.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	write(true, "a", "b")
	write(false, "x")
	write(true, "c")
	cl, st := scanState(t, opts, topic)
	sc := newScanner(cl, 1<<20)
	rp, err := sc.fetch(ctx, &st, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if plainBatches(rp) {
		t.Fatal("a transactional partition was taken as plain")
	}
	var got []string
	if _, err := sc.scan(ctx, &st, 0, 0, st.End[0], func(rec *kgo.Record) bool {
		got = append(got, string(rec.Value))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[a b c]" {
		t.Fatalf("scan passed %v, want the committed [a b c]", got)
	}
}

// TestPlainBatchesRefusesCorruptCRC: a flipped byte in a batch leaves it to
// ProcessFetchPartition, which reports the CRC mismatch as an error.
func TestPlainBatchesRefusesCorruptCRC(t *testing.T) {
	const topic = "batch.crc"
	_, opts := newCluster(t, map[string]int32{topic: 1})
	prod, err := kgo.NewClient(append(append([]kgo.Opt{}, opts...), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if err := prod.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: []byte("hello")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl, st := scanState(t, opts, topic)
	sc := newScanner(cl, 1<<20)
	rp, err := sc.fetch(context.Background(), &st, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !plainBatches(rp) {
		t.Fatal("an intact plain batch was refused")
	}
	bad := *rp
	bad.RecordBatches = bytes.Clone(rp.RecordBatches)
	bad.RecordBatches[len(bad.RecordBatches)-1] ^= 0xff
	if plainBatches(&bad) {
		t.Fatal("a batch with a bad CRC was taken as plain")
	}
	if _, _, err := sc.slow(&st, &bad, 0, func(*kgo.Record) bool { return true }); err == nil {
		t.Fatal("ProcessFetchPartition accepted a bad CRC")
	}
}
