package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/internal/tracing"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// The ingest benchmarks post batches of 100 events over a real socket to a
// gateway on kfake, end to end (HTTP, framing, validation, records, acks=all
// produce, response). BenchmarkProduceDirect is the baseline of the same
// run: the same records produced with the same client, no gateway.

const benchBatch = 100

func benchBody(d aep.Dialect) []byte { return benchBodyN(d, benchBatch) }

func benchBodyN(d aep.Dialect, n int) []byte {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if d == aep.DialectR {
			b.WriteString(rEvent(fmt.Sprintf("s%d", i%10), i))
		} else {
			b.WriteString(dEvent(i, fmt.Sprintf("s%d", i%10)))
		}
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

func benchIngest(b *testing.B, d aep.Dialect) { benchIngestN(b, d, benchBatch) }

func benchIngestN(b *testing.B, d aep.Dialect, n int) { benchIngestAs(b, d, n, nil, "") }

// BenchmarkIngestDPrincipal is BenchmarkIngestD with an API key: one
// without scopes (tenant-wide) and one whose principal's emit: and write:
// scopes every event is checked against (issue 24: enforcement must not be
// measurable at the ingest ratios), for one event a request (what most
// emitters send) and for batches of benchBatch. Compare within one run.
func BenchmarkIngestDPrincipal(b *testing.B) {
	for _, n := range []int{1, benchBatch} {
		for _, c := range []struct{ name, opts string }{
			{"tenant-wide", ""},
			{"scoped", " principal=agent-r scopes=emit:agent:researcher,write:tool,subscribe:task.*"},
		} {
			b.Run(fmt.Sprintf("events=%d/%s", n, c.name), func(b *testing.B) {
				ks, err := ParseKeyStore(strings.NewReader("default sha256:" + sha256hex("k-bench") + c.opts + "\n"))
				if err != nil {
					b.Fatal(err)
				}
				benchIngestAs(b, aep.DialectD, n, ks, "k-bench")
			})
		}
	}
}

func benchIngestAs(b *testing.B, d aep.Dialect, n int, keys *KeyStore, key string) {
	// The same body every time: without the idempotency window, or every
	// request after the first would be answered from it.
	g := newTestGatewayTB(b, func(c *Config) { c.Dedup.Max = -1; c.Keys = keys })
	body := benchBodyN(d, n)
	path, hdr := "/aep/events", map[string]string{}
	if key != "" {
		hdr["Authorization"] = "Bearer " + key
	}
	if d == aep.DialectR {
		path = "/events"
		hdr["AEP-Version"] = "0.1"
	}
	client := &http.Client{}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, g.http.URL+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/x-ndjson")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkIngestR(b *testing.B) { benchIngest(b, aep.DialectR) }
func BenchmarkIngestD(b *testing.B) { benchIngest(b, aep.DialectD) }

// BenchmarkIngestSingle posts one event per request, what most emitters
// do: the per-request costs (authentication, rate limit, framing, the
// produce round trip, the response) are not spread over a batch.
func BenchmarkIngestSingle(b *testing.B) {
	b.Run("R", func(b *testing.B) { benchIngestN(b, aep.DialectR, 1) })
	b.Run("D", func(b *testing.B) { benchIngestN(b, aep.DialectD, 1) })
}

// BenchmarkIngestDTraced is BenchmarkIngestD with tracing on, spans
// exported over OTLP/HTTP to a local receiver that discards them: the cost
// of the request span, 100 event spans and 100 Kafka publish spans
// (plugin/kotel, traceparent headers) per request, with every trace
// sampled (ratio=1) and with none (ratio=0: spans are made but not
// recorded or exported).
func BenchmarkIngestDTraced(b *testing.B) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer sink.Close()
	for _, ratio := range []float64{1, 0} {
		b.Run(fmt.Sprintf("ratio=%v", ratio), func(b *testing.B) {
			stop, err := tracing.Setup(context.Background(), tracing.Config{Endpoint: sink.URL, SampleRatio: ratio})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = stop(context.Background()) }()
			benchIngest(b, aep.DialectD)
		})
	}
}

// BenchmarkProduceDirect is the baseline: 100 records of the same events,
// keyed and with headers, written through KafkaWriter with no HTTP and no
// validation.
func BenchmarkProduceDirect(b *testing.B) {
	g := newTestGatewayB(b)
	info, err := g.srv.ingest.topics.Ensure(context.Background(), "default")
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(benchBody(aep.DialectD)), []byte("\n"))
	attrs := make([]aep.Attrs, len(lines))
	for i, l := range lines {
		if attrs[i], err = aep.Parse(l, aep.Limits{}); err != nil {
			b.Fatal(err)
		}
	}
	w := KafkaWriter{Client: g.client}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		recs := make([]*kgo.Record, len(lines))
		for i, l := range lines {
			recs[i] = &kgo.Record{Topic: info.Name, Key: []byte(attrs[i].Session), Value: l,
				Headers: partitioning.AppendHeaders(nil, &attrs[i])}
		}
		for _, err := range w.Write(context.Background(), recs) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkIngestDDedup is BenchmarkIngestD with fresh event ids in every
// request, with the idempotency window (on) and without it (off, the
// baseline of the same run): the window's cost per request.
func BenchmarkIngestDDedup(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) {
			g := newTestGatewayTB(b, func(c *Config) {
				if !on {
					c.Dedup.Max = -1
				}
			})
			body := benchBody(aep.DialectD)
			client := &http.Client{}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				fresh := bytes.ReplaceAll(body, []byte(`"id":"evt_`), fmt.Appendf(nil, `"id":"e%d_`, i))
				req, _ := http.NewRequest(http.MethodPost, g.http.URL+"/aep/events", bytes.NewReader(fresh))
				req.Header.Set("Content-Type", "application/x-ndjson")
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
