package main

import (
	"context"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// testGateway is a real gateway on a kfake cluster, served over a real
// socket, as gateway/gateway_test.go builds it.
type testGateway struct {
	t       testing.TB
	cluster *kfake.Cluster
	client  *kgo.Client
	url     string
}

const devTopic = "aep.default.events"

func newTestGateway(t testing.TB) *testGateway {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)},
		gateway.NewProducerOpts(gateway.DefaultLimits.MaxEventBytes, 5*time.Second)...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	prov, err := partitioning.NewProvisioner(kadm.NewClient(cl), partitioning.Naming{},
		partitioning.TopicConfig{Partitions: 4, ReplicationFactor: 1})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gateway.New(gateway.Config{Logger: zerolog.New(io.Discard), WriteTimeout: 10 * time.Second},
		gateway.Deps{Topics: prov, Writer: gateway.KafkaWriter{Client: cl}, Pinger: cl})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		_ = srv.Shutdown(context.Background())
	})
	return &testGateway{t: t, cluster: cluster, client: cl, url: hs.URL}
}

// records sums a topic's end offsets: how many records it holds.
func (g *testGateway) records(topic string) int64 {
	g.t.Helper()
	ends, err := kadm.NewClient(g.client).ListEndOffsets(context.Background(), topic)
	if err != nil {
		g.t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			n += o.Offset
		}
	})
	return n
}

// readValues consumes topic from the start until it holds want records or
// 10s passed, and returns the values.
func (g *testGateway) readValues(topic string, want int) [][]byte {
	g.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(g.cluster.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		g.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out [][]byte
	for len(out) < want && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r.Value) })
	}
	return out
}
