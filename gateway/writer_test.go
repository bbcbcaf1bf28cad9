package gateway

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// newWriterCluster is a kfake broker with topic "t" of two partitions and a
// gateway producer on it.
func newWriterCluster(t *testing.T) (*kfake.Cluster, KafkaWriter) {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}, NewProducerOpts(DefaultLimits.MaxEventBytes, 5*time.Second)...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cluster, KafkaWriter{Client: cl}
}

// writerRecords are n keyed records for topic "t".
func writerRecords(n int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "t", Key: []byte(fmt.Sprintf("k%d", i%8)), Value: []byte(fmt.Sprintf("v%d", i))}
	}
	return recs
}

// Every record gets its own outcome in place: a record refused fails alone,
// the others land with their offsets, and records still unacknowledged when
// the context ends are ErrUnacknowledged.
func TestKafkaWriterOutcomes(t *testing.T) {
	t.Run("all written", func(t *testing.T) {
		_, w := newWriterCluster(t)
		recs := writerRecords(10)
		for i, err := range w.Write(context.Background(), recs) {
			if err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
		}
		seen := map[[2]int64]bool{}
		for _, r := range recs {
			k := [2]int64{int64(r.Partition), r.Offset}
			if seen[k] || r.Offset < 0 {
				t.Fatalf("record at partition %d offset %d: duplicate or unset", r.Partition, r.Offset)
			}
			seen[k] = true
		}
	})
	t.Run("one record refused", func(t *testing.T) {
		_, w := newWriterCluster(t)
		recs := writerRecords(8)
		recs[3].Value = make([]byte, 2<<20) // over the producer's batch bound: franz-go fails it alone
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for i, err := range w.Write(ctx, recs) {
			switch {
			case i == 3 && !errors.Is(err, kerr.MessageTooLarge):
				t.Errorf("record 3: %v, want MessageTooLarge", err)
			case i != 3 && err != nil:
				t.Errorf("record %d: %v", i, err)
			}
		}
	})
	t.Run("context ends first", func(t *testing.T) {
		cluster, w := newWriterCluster(t)
		_ = w.Write(context.Background(), writerRecords(2))
		cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
			cluster.KeepControl()
			return nil, nil, true // never answered
		})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		for i, err := range w.Write(ctx, writerRecords(4)) {
			if !errors.Is(err, ErrUnacknowledged) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("record %d: %v, want ErrUnacknowledged wrapping the deadline", i, err)
			}
		}
	})
	t.Run("nothing to write", func(t *testing.T) {
		_, w := newWriterCluster(t)
		if errs := w.Write(context.Background(), nil); len(errs) != 0 {
			t.Errorf("errs %v", errs)
		}
	})
}

// An outcome that comes after WriteLate stopped waiting goes to late, once
// per record, with the record's place in the log.
func TestKafkaWriterLateOutcome(t *testing.T) {
	cluster, w := newWriterCluster(t)
	_ = w.Write(context.Background(), writerRecords(2))
	gate := make(chan struct{})
	cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		cluster.SleepControl(func() { <-gate })
		return nil, nil, false
	})
	lates := make(chan *kgo.Record, 8)
	recs := writerRecords(3)
	errs := w.WriteLate(context.Background(), 100*time.Millisecond, recs, func(r *kgo.Record, err error) {
		if err != nil {
			t.Errorf("late outcome: %v", err)
		}
		lates <- r
	})
	for i, err := range errs {
		if !errors.Is(err, ErrUnacknowledged) {
			t.Fatalf("record %d: %v, want ErrUnacknowledged", i, err)
		}
	}
	close(gate)
	seen := map[*kgo.Record]bool{}
	for range recs {
		select {
		case r := <-lates:
			if seen[r] || r.Offset < 0 {
				t.Fatalf("late outcome twice or without its offset: %v offset %d", seen[r], r.Offset)
			}
			seen[r] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d late outcomes", len(seen), len(recs))
		}
	}
}
