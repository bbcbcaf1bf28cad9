package dialectr_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/dialectr"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// env is the whole stack: kfake, the gateway's real ingest, the delivery
// engine, and the relay's handlers mounted on the gateway, served over a
// real socket.
type env struct {
	t     testing.TB
	url   string
	cl    *kgo.Client
	adm   *kadm.Client
	relay *dialectr.Relay
	srv   *gateway.Server
	seeds []string
}

func newEnv(t testing.TB, mutate func(*dialectr.Config)) *env {
	t.Helper()
	return newEnvGW(t, mutate, nil)
}

// newEnvGW is newEnv with the gateway's configuration changed by gw.
func newEnvGW(t testing.TB, mutate func(*dialectr.Config), gw func(*gateway.Config)) *env {
	t.Helper()
	st := gatewaytest.New(t, gatewaytest.Options{Partitions: 4, Config: gw})
	return serveNode(t, st, st.Server, mutate)
}

// serveNode starts srv, a delivery engine and a Relay on st's cluster,
// mounts the relay on srv and serves it over a real socket: one gateway
// node. Everything is closed when t ends.
func serveNode(t testing.TB, st *gatewaytest.Stack, srv *gateway.Server, mutate func(*dialectr.Config)) *env {
	t.Helper()
	srv.Start()
	fast := kgo.FetchMaxWait(100 * time.Millisecond)
	eng, err := engine.NewEngine(engine.Config{ClientOpts: []kgo.Opt{st.Seeds, fast}, Topics: st.Provisioner, Logger: zerolog.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := dialectr.Config{
		Engine: eng, Ingest: srv.IngestFunc(aep.DialectR), ClientOpts: []kgo.Opt{st.Seeds, fast}, Topics: st.Provisioner,
		Index:  cursor.IndexerConfig{Distance: 4, Every: 3},
		Logger: zerolog.New(io.Discard), ReplayBuffer: 1000,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	rl, err := dialectr.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv.Mount(aep.DialectR, "/stream", rl.Stream())
	srv.Mount(aep.DialectR, "/socket", rl.Socket())
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		_ = rl.Shutdown(context.Background())
		hs.CloseClientConnections()
		hs.Close()
		eng.Close()
	})
	return &env{t: t, url: hs.URL, cl: st.Client, adm: st.Admin, relay: rl, srv: srv, seeds: st.Cluster.ListenAddrs()}
}

// rEvent is a valid dialect R event of session at (epoch, seq).
func rEvent(id, session string, epoch, seq int) string {
	return fmt.Sprintf(`{"aep":"0.1","id":%q,"type":"tool.requested","time":"2026-07-03T10:14:00.000Z","source":"aep://host-a/agent/claude-code/session/%s","agent":"claude-code","session":%q,"seq":%d,"epoch":%d,"subject":"Bash","severity":"notice","data":{"tool":{"name":"Bash"}}}`,
		id, session, session, seq, epoch)
}

// post writes events through POST /events, the real ingest path.
func (e *env) post(events ...string) {
	e.t.Helper()
	e.postAs("", events...)
}

// postAs posts with a bearer token.
func (e *env) postAs(token string, events ...string) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.url+"/events", strings.NewReader(strings.Join(events, "\n")+"\n"))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set("AEP-Version", "0.1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		e.t.Fatalf("ingest: %d %s", resp.StatusCode, b)
	}
}

// sseClient is a GET /stream being read, with what came before the
// stream-open comment.
type sseClient struct {
	*gatewaytest.SSEStream
	t         testing.TB
	first     gatewaytest.SSEMessage // the stream-open comment
	exhausted []string               // replay-exhausted comments before it
}

// getSSE opens GET /stream with the query and headers; it fails the test on
// a status other than 200.
func (e *env) getSSE(query url.Values, hdr map[string]string) *sseClient {
	e.t.Helper()
	s := gatewaytest.MustOpenSSE(e.t, e.url+"/stream?"+query.Encode(), gatewaytest.SSEOptions{Header: header(hdr), Buffer: 1024})
	if ct := s.Resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		e.t.Fatalf("Content-Type %q", ct)
	}
	c := &sseClient{SSEStream: s, t: e.t}
	// The stream is subscribed once its first comment arrives.
	c.first = c.Next()
	for strings.HasPrefix(c.first.Comment(), "replay-exhausted") {
		c.exhausted = append(c.exhausted, c.first.Comment())
		c.first = c.Next()
	}
	if c.first.Comment() != "stream open" {
		e.t.Fatalf("first message %+v, want the stream-open comment", c.first)
	}
	return c
}

// rawSSE sends GET /stream and returns the response unread; cancel ends
// the request.
func (e *env) rawSSE(query url.Values, hdr map[string]string) (*http.Response, func()) {
	e.t.Helper()
	resp := gatewaytest.RequestSSE(e.t, e.url+"/stream?"+query.Encode(), gatewaytest.SSEOptions{Header: header(hdr)})
	return resp, func() { resp.Body.Close() }
}

func header(hdr map[string]string) http.Header {
	h := http.Header{}
	for k, v := range hdr {
		h.Set(k, v)
	}
	return h
}

// nextEvent returns the next event message, skipping pings.
func (c *sseClient) nextEvent() gatewaytest.SSEMessage {
	c.t.Helper()
	m := c.NextSkipping("ping")
	if len(m.Comments) > 0 {
		c.t.Fatalf("unexpected comment %q", m.Comment())
	}
	return m
}

// record finds the stored record of an event id in the tenant topic.
func (e *env) record(id string) *kgo.Record {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.ConsumeTopics("aep.default.events"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), gatewaytest.Wait)
	defer cancel()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			for _, h := range r.Headers {
				if h.Key == "aep-id" && string(h.Value) == id {
					return r
				}
			}
		}
	}
	e.t.Fatalf("event %s not in the log", id)
	return nil
}

// waitIndexed polls until the relay's indexer has indexed partition p below
// offset and its resolver has read what the indexer wrote.
func (e *env) waitIndexed(p int32, offset int64) {
	e.t.Helper()
	gatewaytest.Poll(e.t, fmt.Sprintf("partition %d indexed to %d", p, offset), func() bool {
		x, ok := e.relay.Indexed(gateway.DevTenant, p)
		return ok && x >= offset
	})
	// The resolver must also have read the checkpoints the indexer wrote.
	gatewaytest.Poll(e.t, fmt.Sprintf("the resolver to read the index of partition %d to %d", p, offset), func() bool {
		if x, ok := e.relay.Indexed(gateway.DevTenant, p); !ok || x < offset {
			return false
		}
		ok, err := e.relay.IndexCaughtUp(context.Background(), gateway.DevTenant)
		return err == nil && ok
	})
}

// deleteBefore deletes r's partition below r (retention, as the broker
// would apply it).
func (e *env) deleteBefore(r *kgo.Record) {
	e.t.Helper()
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: r.Topic, Partition: r.Partition, At: r.Offset})
	if _, err := e.adm.DeleteRecords(context.Background(), offs); err != nil {
		e.t.Fatal(err)
	}
}
