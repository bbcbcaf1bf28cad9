// Package clitest holds the test fixtures aepctl's and aepbench's tests
// share: a real gateway on a kfake cluster over a real socket, and a proxy
// that fails the first requests. Only tests import it.
package clitest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/internal/cli"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Gateway is a real gateway on a kfake cluster, served over a real
// socket, as gateway/gateway_test.go builds it.
type Gateway struct {
	t       testing.TB
	Cluster *kfake.Cluster
	Client  *kgo.Client
	URL     string
}

// DevTopic is the events topic of the development tenant.
const DevTopic = "aep.default.events"

// NewGateway starts one; everything stops with the test.
func NewGateway(t testing.TB) *Gateway {
	t.Helper()
	st := gatewaytest.New(t, gatewaytest.Options{Partitions: 4, Config: func(c *gateway.Config) { c.WriteTimeout = 10 * time.Second }})
	st.Server.Start()
	hs := httptest.NewServer(st.Server.Handler())
	t.Cleanup(hs.Close)
	if tt, ok := t.(*testing.T); ok { // the user's config file plays no part
		tt.Setenv(cli.EnvConfig, filepath.Join(tt.TempDir(), "no-config"))
		tt.Setenv(cli.EnvProfile, "")
	}
	return &Gateway{t: t, Cluster: st.Cluster, Client: st.Client, URL: hs.URL}
}

// Of wraps a gateway a test started itself (on cluster, with client, served
// at url).
func Of(t testing.TB, cluster *kfake.Cluster, client *kgo.Client, url string) *Gateway {
	return &Gateway{t: t, Cluster: cluster, Client: client, URL: url}
}

// Records sums a topic's end offsets: how many records it holds.
func (g *Gateway) Records(topic string) int64 {
	g.t.Helper()
	ends, err := kadm.NewClient(g.Client).ListEndOffsets(context.Background(), topic)
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

// ReadValues consumes topic from the start until it holds want records or
// 10s passed, and returns the values.
func (g *Gateway) ReadValues(topic string, want int) [][]byte {
	g.t.Helper()
	var out [][]byte
	for _, r := range g.ReadRecords(topic, want) {
		out = append(out, r.Value)
	}
	return out
}

// ReadRecords is readValues with the whole records.
func (g *Gateway) ReadRecords(topic string, want int) []*kgo.Record {
	g.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(g.Cluster.ListenAddrs()...), kgo.ConsumeTopics(topic),
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

// FlakyProxy answers 503 to the first `fail` requests, then proxies to
// target; it counts every request and keeps the bodies.
type FlakyProxy struct {
	Fail   int32
	Status int // of the failures; zero means 503
	Hits   atomic.Int32
	Bodies chan []byte
	proxy  *httputil.ReverseProxy
}

func (f *FlakyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := f.Hits.Add(1)
	body, _ := io.ReadAll(r.Body)
	select {
	case f.Bodies <- body:
	default:
	}
	if n <= f.Fail {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		if f.Status == http.StatusTooManyRequests {
			w.WriteHeader(f.Status)
			fmt.Fprint(w, `{"error":"limit-exceeded","detail":"the tenant's ingest rate limit is exceeded; retry after 1s"}`)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"error":"unavailable","detail":"the event log did not take every event","accepted":0}`)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	f.proxy.ServeHTTP(w, r)
}

// NewFlakyProxy serves a FlakyProxy to target; it stops with the test.
func NewFlakyProxy(t *testing.T, target string, fail int32) (*FlakyProxy, string) {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	f := &FlakyProxy{Fail: fail, Bodies: make(chan []byte, 16), proxy: httputil.NewSingleHostReverseProxy(u)}
	hs := httptest.NewServer(f)
	t.Cleanup(hs.Close)
	return f, hs.URL
}
