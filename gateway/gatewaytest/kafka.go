package gatewaytest

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// Kafka is an in-process kfake cluster (one broker) holding a tenant's
// events topic (default naming) with Parts partitions, and a producer
// that writes to the partition a record names. Both close by tb.Cleanup.
// The engine's and the durable cluster's tests share it.
type Kafka struct {
	Cluster *kfake.Cluster
	Prod    *kgo.Client
	Topic   string
	Parts   int32
}

// NewKafka starts the cluster for tenant with parts partitions.
func NewKafka(tb testing.TB, tenant string, parts int32, opts ...kfake.Opt) *Kafka {
	tb.Helper()
	topic := partitioning.Naming{}.Events(tenant)
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(parts, topic)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	k := &Kafka{Cluster: c, Topic: topic, Parts: parts}
	k.Prod = k.newProducer(tb)
	return k
}

func (k *Kafka) newProducer(tb testing.TB) *kgo.Client {
	tb.Helper()
	prod, err := kgo.NewClient(kgo.SeedBrokers(k.Cluster.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(prod.Close)
	return prod
}

// WithNewProducer returns a copy of k with a producer of its own, started
// now: it knows the partitions the topic has now (k's own learns of added
// ones only at its next metadata refresh).
func (k *Kafka) WithNewProducer(tb testing.TB) *Kafka {
	tb.Helper()
	c := *k
	c.Prod = k.newProducer(tb)
	return &c
}

// ProduceD writes one dialect D event of type typ in session sess (id
// evt_<sess>_<n>) to partition p and returns its offset.
func (k *Kafka) ProduceD(tb testing.TB, p int32, typ, sess string, n int) int64 {
	tb.Helper()
	a := aep.Attrs{Dialect: aep.DialectD, ID: fmt.Sprintf("evt_%s_%d", sess, n), Type: typ, Source: "agent:t", Session: sess}
	val := fmt.Sprintf(`{"aep_version":"0.1","id":%q,"type":%q,"source":"agent:t","session_id":%q,"created_at":"2026-01-01T00:00:00Z","payload":{}}`, a.ID, typ, sess)
	r := &kgo.Record{Topic: k.Topic, Partition: p, Key: []byte(sess), Value: []byte(val), Headers: partitioning.AppendHeaders(nil, &a)}
	res := k.Prod.ProduceSync(context.Background(), r)
	if err := res.FirstErr(); err != nil {
		tb.Fatal(err)
	}
	return res[0].Record.Offset
}
