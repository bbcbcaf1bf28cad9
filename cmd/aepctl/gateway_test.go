package main

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
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
	st := gatewaytest.New(t, gatewaytest.Options{Partitions: 4, Config: func(c *gateway.Config) { c.WriteTimeout = 10 * time.Second }})
	st.Server.Start()
	hs := httptest.NewServer(st.Server.Handler())
	t.Cleanup(hs.Close)
	if tt, ok := t.(*testing.T); ok { // the user's config file plays no part
		tt.Setenv(envConfig, filepath.Join(tt.TempDir(), "no-config"))
		tt.Setenv(envProfile, "")
	}
	return &testGateway{t: t, cluster: st.Cluster, client: st.Client, url: hs.URL}
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
	var out [][]byte
	for _, r := range g.readRecords(topic, want) {
		out = append(out, r.Value)
	}
	return out
}

// readRecords is readValues with the whole records.
func (g *testGateway) readRecords(topic string, want int) []*kgo.Record {
	g.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(g.cluster.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		g.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}
