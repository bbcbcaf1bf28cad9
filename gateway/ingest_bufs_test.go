package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// Requests in parallel, both dialects, single events and NDJSON batches of
// many sizes, reuse each other's pooled buffers: every record must still
// carry the event it was built from, with that event's key and headers.
func TestIngestBuffersReusedAcrossRequests(t *testing.T) {
	g := newTestGateway(t, nil)
	const workers, perWorker = 6, 25
	var total atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				req := w*perWorker + i
				n := 1 + req*7%60
				var body []byte
				for k := range n {
					seq := req*100 + k
					if w%2 == 0 {
						body = append(body, rEvent(fmt.Sprintf("s%d", seq%13), seq)...)
					} else {
						body = append(body, dEvent(seq, fmt.Sprintf("s%d", seq%13))...)
					}
					body = append(body, '\n')
				}
				path, hdr, ct := "/events", "0.1", "application/x-ndjson"
				if w%2 == 1 {
					path, hdr = "/aep/events", ""
				}
				if n == 1 {
					ct = "application/json"
				}
				hr, _ := http.NewRequest(http.MethodPost, g.http.URL+path, bytes.NewReader(body))
				hr.Header.Set("Content-Type", ct)
				if hdr != "" {
					hr.Header.Set("AEP-Version", hdr)
				}
				resp, err := http.DefaultClient.Do(hr)
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					t.Errorf("request %d: %d %s", req, resp.StatusCode, b)
					return
				}
				total.Add(int64(n))
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	recs := g.readAll("aep.default.events", int(total.Load()))
	if len(recs) != int(total.Load()) {
		t.Fatalf("%d records, %d events accepted", len(recs), total.Load())
	}
	seen := map[string]bool{}
	for _, r := range recs {
		d := aep.ParseDialect(header(r, partitioning.HeaderDialect))
		a, err := aep.ParseAs(d, r.Value, aep.Limits{})
		if err != nil {
			t.Fatalf("record value is not a valid %s event: %v: %s", d, err, r.Value)
		}
		if seen[a.ID] {
			t.Fatalf("event %s written twice", a.ID)
		}
		seen[a.ID] = true
		if header(r, partitioning.HeaderID) != a.ID || header(r, partitioning.HeaderType) != a.Type ||
			header(r, partitioning.HeaderSession) != a.Session || string(r.Key) != a.Session {
			t.Fatalf("record of %s: key %q, headers %v do not match its value %s", a.ID, r.Key, r.Headers, r.Value)
		}
	}
}

// fixedTopic resolves every tenant to the writer cluster's topic "t".
type fixedTopic struct{}

func (fixedTopic) Ensure(context.Context, string) (partitioning.TopicInfo, error) {
	return partitioning.TopicInfo{Name: "t", Partitions: 2}, nil
}

// A request's record buffers are marked held exactly when Kafka may still
// hold records built in them (it did not acknowledge them in time): those
// buffers must never be reused.
func TestIngestWriteMarksHeldBuffers(t *testing.T) {
	cluster, w := newWriterCluster(t)
	in := &ingestor{limits: DefaultLimits.withDefaults(), topics: fixedTopic{}, writer: w, timeout: 300 * time.Millisecond,
		metrics: newMetrics(prometheus.NewRegistry())}
	outsOf := func(n int) []outcome {
		frames := make([]frame, n)
		for i := range frames {
			raw := []byte(rEvent("s1", i))
			frames[i] = frame{index: i, line: i + 1, raw: raw, size: len(raw)}
		}
		outs, ok := in.validate(aep.DialectR, frames, nil)
		if !ok {
			t.Fatal("events did not validate")
		}
		return outs
	}
	var rb recBufs
	if err := in.write(context.Background(), "acme", publisher{via: viaHTTP}, aep.DialectR, outsOf(5), true, &rb); err != nil || rb.held {
		t.Fatalf("all acknowledged: err %v, held %v", err, rb.held)
	}
	cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		return nil, nil, true // never answered
	})
	outs := outsOf(3)
	if err := in.write(context.Background(), "acme", publisher{via: viaHTTP}, aep.DialectR, outs, true, &rb); !errors.Is(err, ErrUnacknowledged) || !rb.held {
		t.Fatalf("unacknowledged: err %v, held %v", err, rb.held)
	}
	for i := range outs {
		if !errors.Is(outs[i].writeErr, ErrUnacknowledged) {
			t.Errorf("event %d: %v", i, outs[i].writeErr)
		}
	}
}
