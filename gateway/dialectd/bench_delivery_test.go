package dialectd

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// bdRig is a whole gateway on in-process kfake: ingest (gateway.New) and
// the dialect D SSE stream on one httptest server, the engine.Engine behind it, and
// the gateway's own producer client for writing straight to the topic.
type bdRig struct {
	tb     testing.TB
	url    string
	seeds  kgo.Opt
	prod   *kgo.Client // the gateway's producer (gateway.NewProducerOpts)
	eng    *engine.Engine
	topic  string
	tenant tenant.Tenant
}

// bdRigConfig shapes a rig; zero fields mean the defaults below.
type bdRigConfig struct {
	SSE        SSEConfig
	Partitions int32                           // default 3
	Listener   func(net.Listener) net.Listener // wraps the server's listener (gatewaytest.SmallSockets)
	Queue      int                             // engine.Engine engine.Config.Queue
}

func newBDRig(tb testing.TB, cfg bdRigConfig) *bdRig {
	tb.Helper()
	if cfg.Partitions == 0 {
		cfg.Partitions = 3
	}
	st := gatewaytest.New(tb, gatewaytest.Options{Partitions: cfg.Partitions})
	seeds, cl, prov, srv, kr := st.Seeds, st.Client, st.Provisioner, st.Server, st.Keyring
	naming := partitioning.Naming{}
	tn := tenant.MustParse(gateway.DevTenant)
	if _, err := prov.Ensure(context.Background(), tn.String()); err != nil {
		tb.Fatal(err)
	}
	eng, err := engine.NewEngine(engine.Config{ClientOpts: []kgo.Opt{seeds, kgo.FetchMaxWait(200 * time.Millisecond)}, Topics: prov, Queue: cfg.Queue, Logger: zerolog.New(io.Discard)})
	if err != nil {
		tb.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /aep/events", gatewaytest.WithTenant(tn.String(), NewSSEHandler(eng, kr, cfg.SSE)))
	mux.Handle("/", srv.Handler())
	hs := httptest.NewUnstartedServer(mux)
	if cfg.Listener != nil {
		hs.Listener = cfg.Listener(hs.Listener)
	}
	hs.Start()
	tb.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		eng.Close()
	})
	return &bdRig{tb: tb, url: hs.URL, seeds: seeds, prod: cl, eng: eng, topic: naming.Events(tn.String()), tenant: tn}
}

// bdValue is a ~300-byte dialect D event whose id carries n.
func bdValue(prefix string, n int) []byte {
	return fmt.Appendf(nil, `{"aep_version":"0.1","id":"evt_%s_%08d","type":"task.progress","source":"agent:researcher","target":"tool:crawler","task_id":"task_01","session_id":"sess_01","created_at":"2026-07-09T10:00:00Z","payload":{"progress":0.5,"message":"crawling page 3 of 10"}}`, prefix, n)
}

// bdRecord is the record ingest would write for bdValue(prefix, n): same
// headers, key, topic; the partitioner picks the partition unless p >= 0.
func (r *bdRig) bdRecord(prefix string, n int, p int32) *kgo.Record {
	a := aep.Attrs{Dialect: aep.DialectD, ID: fmt.Sprintf("evt_%s_%08d", prefix, n), Type: "task.progress", Source: "agent:researcher", Session: "sess_01", Task: "task_01", Target: "tool:crawler"}
	rec := &kgo.Record{Topic: r.topic, Key: []byte(fmt.Sprintf("k%d", n)), Value: bdValue(prefix, n), Headers: partitioning.AppendHeaders(nil, &a)}
	if p >= 0 {
		rec.Partition = p
	}
	return rec
}

// produce writes records [from, from+n) with prefix straight to the topic
// and waits for the acks.
func (r *bdRig) produce(prefix string, from, n int) {
	r.tb.Helper()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = r.bdRecord(prefix, from+i, -1)
	}
	if err := r.prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		r.tb.Fatal(err)
	}
}

// bdClient returns an HTTP/1.1 client that keeps up to conns connections
// to the one host open at once.
func bdClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxConnsPerHost: conns + 16, MaxIdleConnsPerHost: conns + 16, MaxIdleConns: conns + 16,
		DisableCompression: true, ForceAttemptHTTP2: false,
	}}
}

// openSSE opens GET /aep/events?query and returns the response once the
// ": stream open" comment was read (the subscription is registered then),
// with the reader the benchmark counts raw lines from.
func (r *bdRig) openSSE(cl *http.Client, query string) (*http.Response, *bufio.Reader) {
	r.tb.Helper()
	resp := gatewaytest.RequestSSE(r.tb, r.url+"/aep/events?"+query, gatewaytest.SSEOptions{Client: cl})
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r.tb.Fatalf("open stream: %d %s", resp.StatusCode, b)
	}
	br := bufio.NewReader(resp.Body) // 4 KiB: a message is about 700 bytes
	line, err := br.ReadString('\n')
	if err != nil || line != ": stream open\n" {
		resp.Body.Close()
		r.tb.Fatalf("first line %q, %v", line, err)
	}
	return resp, br
}

// bdWait polls cond finely (the wait is inside the timed loop), failing
// after a generous bound (a hang, not a timing assertion).
func bdWait(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	gatewaytest.PollEvery(tb, time.Minute, 50*time.Microsecond, what, cond)
}

// BenchmarkDeliveryFanout: delivered events per second to 1, 100 and 1000
// subscribers of every event. Each iteration produces 100 events straight
// to the tenant topic (3 partitions) and waits until every subscriber has
// received all of them (up to 4 batches in flight). "sse" subscribers are HTTP/1.1 clients over real
// sockets reading the dialect D stream; "engine" subscribers read the
// engine.Subscription queues (no HTTP, no SSE encoding, no cursor), to separate
// the fan-out from the HTTP cost. Queues (1024) exceed the 400 events in
// flight, so nothing is dropped: a drop would leave the wait unfinished.
func BenchmarkDeliveryFanout(b *testing.B) {
	const batch = 100
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("engine/subs=%d", n), func(b *testing.B) {
			r := newBDRig(b, bdRigConfig{Queue: 1024})
			defer bdAnchor(b, r).Close()
			heap0 := bdHeap()
			var got atomic.Int64
			var wg sync.WaitGroup
			subs := make([]*engine.Subscription, n)
			for i := range subs {
				s, err := r.eng.Subscribe(context.Background(), engine.Request{Tenant: r.tenant, Filter: mustFilter(b, "types=task.*")})
				if err != nil {
					b.Fatal(err)
				}
				subs[i] = s
				wg.Go(func() {
					for range s.Deliveries().All() {
						got.Add(1)
					}
				})
			}
			defer func() {
				for _, s := range subs {
					s.Close()
				}
				wg.Wait()
			}()
			report := bdHeapPerSub(heap0, n)
			bdFanout(b, r, n, batch, &got)
			report(b)
		})
		b.Run(fmt.Sprintf("sse/subs=%d", n), func(b *testing.B) {
			r := newBDRig(b, bdRigConfig{SSE: SSEConfig{Queue: 1024}})
			defer bdAnchor(b, r).Close()
			heap0 := bdHeap()
			cl := bdClient(n)
			defer cl.CloseIdleConnections()
			var got atomic.Int64
			var wg sync.WaitGroup
			bodies := make([]io.Closer, n)
			for i := range bodies {
				resp, br := r.openSSE(cl, "types=task.*")
				bodies[i] = resp.Body
				wg.Go(func() {
					for {
						line, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if bytes.HasPrefix(line, []byte("data: ")) {
							got.Add(1)
						}
					}
				})
			}
			defer func() {
				for _, c := range bodies {
					c.Close()
				}
				wg.Wait()
			}()
			report := bdHeapPerSub(heap0, n) // both ends of each stream: one process
			bdFanout(b, r, n, batch, &got)
			report(b)
		})
	}
}

// bdDepth is how many produced batches may be in flight (produced, not
// yet received by every subscriber); depth × batch stays below the queue.
const bdDepth = 4

// bdHeapPerSub is the live heap each idle subscriber holds: heap0 was read
// with only the anchor on the tail (so the tail and its client are outside
// the difference), now n subscribers are open and nothing has been produced
// yet. Reported after the run (ResetTimer drops metrics reported before);
// only at 1000 subscribers: below, a few MB of heap that comes and goes
// around the rig's start (franz-go and kfake buffers) swamp the figure.
func bdHeapPerSub(heap0 int64, n int) func(b *testing.B) {
	kib := float64(bdHeap()-heap0) / float64(n) / 1024
	return func(b *testing.B) {
		if n >= 1000 {
			b.ReportMetric(kib, "heap-KiB/sub")
		}
	}
}

// bdAnchor subscribes to nothing that is produced, so the tail runs from
// before the measured subscribers until after them.
func bdAnchor(b *testing.B, r *bdRig) *engine.Subscription {
	s, err := r.eng.Subscribe(context.Background(), engine.Request{Tenant: r.tenant, Filter: mustFilter(b, "types=anchor.none")})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// bdHeap is the live heap after a collection.
func bdHeap() int64 {
	runtime.GC()
	runtime.GC() // sync.Pool victims go on the second
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

func bdFanout(b *testing.B, r *bdRig, subs, batch int, got *atomic.Int64) {
	b.ReportAllocs()
	sent := 0
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	for range b.N {
		r.produce("fan", sent, batch)
		sent += batch
		// Keep at most depth batches in flight per subscriber.
		want := int64(max(sent-(bdDepth-1)*batch, 0) * subs)
		bdWait(b, "every subscriber to receive the batches", func() bool { return got.Load() >= want })
	}
	bdWait(b, "every subscriber to receive every batch", func() bool { return got.Load() >= int64(sent*subs) })
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	if got.Load() != int64(sent*subs) {
		b.Fatalf("received %d, want %d", got.Load(), sent*subs)
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(sent*subs)/sec, "deliveries/s")
	b.ReportMetric(float64(sent)/sec, "events/s")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(sent*subs), "allocs/delivery")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(sent*subs), "B/delivery")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkDeliveryLatency: publish→deliver latency at a fixed rate
// (1000 events/s, 2000 events), p50 and p99, end to end through the
// gateway (POST /aep/events of one event, the time taken just before the
// request, until its SSE message is read by a subscriber on a real socket)
// beside the baseline of a direct franz-go produce (the gateway's producer
// options) to a plain consumer of the same topic on the same kfake broker,
// run first in the same benchmark.
func BenchmarkDeliveryLatency(b *testing.B) {
	const rate, count = 1000, 2000
	b.ReportAllocs()
	var direct, gw []time.Duration
	for b.Loop() {
		r := newBDRig(b, bdRigConfig{})
		direct = append(direct, bdDirectLatency(b, r, rate, count)...)
		gw = append(gw, bdGatewayLatency(b, r, rate, count)...)
	}
	slices.Sort(direct)
	slices.Sort(gw)
	q := func(s []time.Duration, f float64) float64 {
		return float64(s[int(f*float64(len(s)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(q(gw, 0.5), "gw-p50-ms")
	b.ReportMetric(q(gw, 0.99), "gw-p99-ms")
	b.ReportMetric(q(direct, 0.5), "direct-p50-ms")
	b.ReportMetric(q(direct, 0.99), "direct-p99-ms")
	b.ReportMetric(q(gw, 0.5)/q(direct, 0.5), "p50-ratio")
	b.ReportMetric(q(gw, 0.99)/q(direct, 0.99), "p99-ratio")
	b.ReportMetric(0, "ns/op")
}

// bdPace calls send(i) for i in [0, count) at rate per second, on a fixed
// schedule (a late send does not shift the later ones), recording the
// start time of each in starts.
func bdPace(rate, count int, starts []time.Time, send func(i int)) {
	period := time.Second / time.Duration(rate)
	t0 := time.Now()
	for i := range count {
		if d := time.Until(t0.Add(time.Duration(i) * period)); d > 0 {
			time.Sleep(d)
		}
		starts[i] = time.Now()
		send(i)
	}
}

// bdCollect records when each event index arrives; done is closed when all
// count have.
type bdCollect struct {
	mu     sync.Mutex
	arrive []time.Time
	seen   int
	done   chan struct{}
}

func newBDCollect(count int) *bdCollect {
	return &bdCollect{arrive: make([]time.Time, count), done: make(chan struct{})}
}

func (c *bdCollect) mark(i int, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.arrive) || !c.arrive[i].IsZero() {
		return
	}
	c.arrive[i] = at
	if c.seen++; c.seen == len(c.arrive) {
		close(c.done)
	}
}

func (c *bdCollect) latencies(tb testing.TB, starts []time.Time) []time.Duration {
	select {
	case <-c.done:
	case <-time.After(60 * time.Second):
		tb.Fatalf("only %d events arrived", c.seen)
	}
	out := make([]time.Duration, len(starts))
	for i := range out {
		out[i] = c.arrive[i].Sub(starts[i])
	}
	return out
}

// bdIndex parses the event index out of "evt_<prefix>_<8 digits>" in line.
func bdIndex(line []byte, prefix string) int {
	k := bytes.Index(line, []byte("evt_"+prefix+"_"))
	if k < 0 || len(line) < k+len(prefix)+13 {
		return -1
	}
	n, err := strconv.Atoi(string(line[k+len(prefix)+5 : k+len(prefix)+13]))
	if err != nil {
		return -1
	}
	return n
}

func bdDirectLatency(b *testing.B, r *bdRig, rate, count int) []time.Duration {
	ends, err := kadm.NewClient(r.prod).ListEndOffsets(context.Background(), r.topic)
	if err != nil {
		b.Fatal(err)
	}
	offs := map[int32]kgo.Offset{}
	ends.Each(func(lo kadm.ListedOffset) { offs[lo.Partition] = kgo.NewOffset().At(lo.Offset) })
	cons, err := kgo.NewClient(r.seeds, kgo.FetchMaxWait(200*time.Millisecond), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.topic: offs}))
	if err != nil {
		b.Fatal(err)
	}
	defer cons.Close()
	col := newBDCollect(count)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() {
		for ctx.Err() == nil {
			fs := cons.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(rec *kgo.Record) { col.mark(bdIndex(rec.Value, "dir"), now) })
		}
	})
	starts := make([]time.Time, count)
	bdPace(rate, count, starts, func(i int) {
		if err := r.prod.ProduceSync(ctx, r.bdRecord("dir", i, -1)).FirstErr(); err != nil {
			b.Error(err)
		}
	})
	return col.latencies(b, starts)
}

func bdGatewayLatency(b *testing.B, r *bdRig, rate, count int) []time.Duration {
	cl := bdClient(4)
	defer cl.CloseIdleConnections()
	resp, br := r.openSSE(cl, "types=task.*")
	col := newBDCollect(count)
	var wg sync.WaitGroup
	defer func() { resp.Body.Close(); wg.Wait() }()
	wg.Go(func() {
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			if bytes.HasPrefix(line, []byte("data: ")) {
				col.mark(bdIndex(line, "gw"), time.Now())
			}
		}
	})
	starts := make([]time.Time, count)
	bdPace(rate, count, starts, func(i int) {
		body := append(bdValue("gw", i), '\n')
		resp, err := cl.Post(r.url+"/aep/events", "application/x-ndjson", bytes.NewReader(body))
		if err != nil {
			b.Error(err)
			return
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted || !strings.Contains(string(out), `"accepted":1`) {
			b.Errorf("ingest: %d %s", resp.StatusCode, out)
		}
	})
	return col.latencies(b, starts)
}

func mustFilter(tb testing.TB, q string) *filtering.Filter { return gatewaytest.FilterD(tb, q) }
