package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
)

// genLines returns n events of dialect d as NDJSON.
func genLines(t *testing.T, d aep.Dialect, n int) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteEvents(context.Background(), &b, NewGenerator(GenOptions{Dialect: d, Sessions: 3}), n); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

var fastRetry = RetryPolicy{Attempts: 4, Base: time.Millisecond, Max: 5 * time.Millisecond}

func TestPublishMixedDialectsAllAccepted(t *testing.T) {
	g := newTestGateway(t)
	// R, a blank line, D, then R again: three runs of one dialect each.
	in := genLines(t, aep.DialectR, 12) + "\n" + genLines(t, aep.DialectD, 7) + genLines(t, aep.DialectR, 3)
	var out, errb bytes.Buffer
	sum, err := Publish(context.Background(), &Client{BaseURL: g.url, Retry: fastRetry}, strings.NewReader(in),
		PublishOptions{Batch: 5}, &out, &errb)
	if err != nil {
		t.Fatalf("Publish: %v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
	}
	want := PublishSummary{Events: 22, Accepted: 22, Requests: 6, Batches: 6} // R 5+5+2, D 5+2, R 3
	if sum != want {
		t.Fatalf("summary %+v, want %+v\n%s", sum, want, out.String())
	}
	if errb.Len() != 0 {
		t.Fatalf("unexpected stderr: %s", errb.String())
	}
	if n := g.records(devTopic); n != 22 {
		t.Fatalf("topic holds %d records, want 22", n)
	}
	if got := strings.Count(out.String(), "\n"); got != 7 { // a line per batch and the total
		t.Fatalf("%d summary lines, want 7:\n%s", got, out.String())
	}
}

func TestPublishRejectedLineExitsOne(t *testing.T) {
	g := newTestGateway(t)
	lines := strings.SplitAfter(genLines(t, aep.DialectR, 4), "\n")
	lines[2] = strings.Replace(lines[2], `"seq":`, `"seq":-`, 1) // line 3: negative seq
	d := strings.SplitAfter(genLines(t, aep.DialectD, 3), "\n")
	d[1] = strings.Replace(d[1], `"type":"task.progress"`, `"type":"Task"`, 1) // line 6
	in := strings.Join(lines, "") + strings.Join(d, "") + "{\"neither\":1}\n"
	file := filepath.Join(t.TempDir(), "events.ndjson")
	if err := os.WriteFile(file, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"publish", "--url", g.url, file}, nil, &out, &errb)
	if code != exitFailed {
		t.Fatalf("exit %d, want 1\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
	}
	for _, want := range []string{
		"line 3: invalid-event (seq):",
		"line 6: invalid_event_type (type):",
		"line 8: not an event of either dialect",
	} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
	if !strings.Contains(out.String(), "total: 8 events, 2 accepted, 6 rejected, 0 failed") {
		t.Errorf("stdout lacks the total:\n%s", out.String())
	}
	// R is all or nothing; D took its two valid events.
	if n := g.records(devTopic); n != 2 {
		t.Fatalf("topic holds %d records, want 2", n)
	}
}

// flakyProxy answers 503 to the first `fail` requests, then proxies to
// target; it counts every request and keeps the bodies.
type flakyProxy struct {
	fail   int32
	status int // of the failures; zero means 503
	hits   atomic.Int32
	bodies chan []byte
	proxy  *httputil.ReverseProxy
}

func (f *flakyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := f.hits.Add(1)
	body, _ := io.ReadAll(r.Body)
	select {
	case f.bodies <- body:
	default:
	}
	if n <= f.fail {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		if f.status == http.StatusTooManyRequests {
			w.WriteHeader(f.status)
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

func newFlakyProxy(t *testing.T, target string, fail int32) (*flakyProxy, string) {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	f := &flakyProxy{fail: fail, bodies: make(chan []byte, 16), proxy: httputil.NewSingleHostReverseProxy(u)}
	hs := httptest.NewServer(f)
	t.Cleanup(hs.Close)
	return f, hs.URL
}

func TestPublishRetries503WithSameBytes(t *testing.T) {
	for _, d := range []aep.Dialect{aep.DialectR, aep.DialectD} {
		t.Run(d.String(), func(t *testing.T) {
			g := newTestGateway(t)
			f, u := newFlakyProxy(t, g.url, 2)
			var out, errb bytes.Buffer
			sum, err := Publish(context.Background(), &Client{BaseURL: u, Retry: fastRetry}, strings.NewReader(genLines(t, d, 10)),
				PublishOptions{Dialect: d}, &out, &errb)
			if err != nil {
				t.Fatalf("Publish: %v\n%s%s", err, out.String(), errb.String())
			}
			if sum.Accepted != 10 || sum.Requests != 3 || f.hits.Load() != 3 {
				t.Fatalf("accepted %d, requests %d, proxy hits %d; want 10, 3, 3", sum.Accepted, sum.Requests, f.hits.Load())
			}
			first := <-f.bodies
			for range 2 {
				if b := <-f.bodies; !bytes.Equal(b, first) {
					t.Fatal("a retry sent different bytes")
				}
			}
			if n := strings.Count(errb.String(), "retrying in"); n != 2 {
				t.Fatalf("%d retry notes on stderr, want 2:\n%s", n, errb.String())
			}
			if n := g.records(devTopic); n != 10 {
				t.Fatalf("topic holds %d records, want 10", n)
			}
		})
	}
}

func TestPublishRetriesRateLimit(t *testing.T) {
	g := newTestGateway(t)
	f, u := newFlakyProxy(t, g.url, 1)
	f.status = http.StatusTooManyRequests
	var out, errb bytes.Buffer
	sum, err := Publish(context.Background(), &Client{BaseURL: u, Retry: fastRetry}, strings.NewReader(genLines(t, aep.DialectR, 4)),
		PublishOptions{}, &out, &errb)
	if err != nil || sum.Accepted != 4 || f.hits.Load() != 2 {
		t.Fatalf("err %v, summary %+v, hits %d", err, sum, f.hits.Load())
	}
}

func TestPublishGivesUpAfterAttempts(t *testing.T) {
	g := newTestGateway(t)
	f, u := newFlakyProxy(t, g.url, 100)
	var out, errb bytes.Buffer
	sum, err := Publish(context.Background(), &Client{BaseURL: u, Retry: fastRetry}, strings.NewReader(genLines(t, aep.DialectR, 5)),
		PublishOptions{}, &out, &errb)
	if !errors.Is(err, errRejected) {
		t.Fatalf("err %v, want errRejected", err)
	}
	if sum.Failed != 5 || sum.Accepted != 0 || f.hits.Load() != int32(fastRetry.Attempts) {
		t.Fatalf("failed %d accepted %d hits %d; want 5, 0, %d", sum.Failed, sum.Accepted, f.hits.Load(), fastRetry.Attempts)
	}
}

func TestPublishNeverRetries4xx(t *testing.T) {
	var hits atomic.Int32
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":"unauthorized","detail":"unknown API key"}`)
	}))
	defer hs.Close()
	var out, errb bytes.Buffer
	// Two batches: the refused credential stops publishing after the first
	// request, and its events are not counted as rejected (no event was
	// judged).
	sum, err := Publish(context.Background(), &Client{BaseURL: hs.URL, Token: "nope", Retry: fastRetry},
		strings.NewReader(genLines(t, aep.DialectR, 3)), PublishOptions{Batch: 2}, &out, &errb)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized || apiErr.Code != "unauthorized" || hits.Load() != 1 {
		t.Fatalf("err %v, hits %d; want the 401 as an APIError after 1 request", err, hits.Load())
	}
	if sum.Rejected != 0 || sum.Accepted != 0 || sum.Failed != 0 {
		t.Fatalf("summary %+v: a refused credential counted events", sum)
	}
	if !strings.Contains(err.Error(), "unknown API key") || !strings.Contains(out.String(), "refused the credential") {
		t.Fatalf("err %v, stdout: %s", err, out.String())
	}
}

func TestPublishRetriesConnectionErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	var out, errb bytes.Buffer
	sum, err := Publish(context.Background(), &Client{BaseURL: "http://" + addr, Retry: fastRetry},
		strings.NewReader(genLines(t, aep.DialectD, 2)), PublishOptions{}, &out, &errb)
	if !errors.Is(err, errRejected) || sum.Failed != 2 || sum.Requests != fastRetry.Attempts {
		t.Fatalf("err %v failed %d requests %d", err, sum.Failed, sum.Requests)
	}
}

// A D answer listing a retryable per-event error: only that event is sent
// again, until it is taken or the attempts run out.
func TestPublishResendsRetryableDEvents(t *testing.T) {
	tests := []struct {
		name                   string
		failures               int32 // answers refusing the event
		accepted, failed, hits int
	}{
		{"taken on the second round", 1, 3, 0, 2},
		{"never taken", 100, 2, 1, fastRetry.Attempts},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int32
			var last atomic.Value
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				n := hits.Add(1)
				w.WriteHeader(http.StatusAccepted)
				switch {
				case n == 1:
					fmt.Fprint(w, `{"accepted":2,"rejected":1,"errors":[{"event_index":1,"error":{"code":"internal_error","message":"the event log did not take this event","retryable":true}}],"topic":"t","positions":[]}`)
				case n <= tc.failures:
					last.Store(body)
					fmt.Fprint(w, `{"accepted":0,"rejected":1,"errors":[{"event_index":0,"error":{"code":"internal_error","message":"the event log did not take this event","retryable":true}}],"topic":"t","positions":[]}`)
				default:
					last.Store(body)
					fmt.Fprint(w, `{"accepted":1,"rejected":0,"errors":[],"topic":"t","positions":[]}`)
				}
			}))
			defer hs.Close()
			in := genLines(t, aep.DialectD, 3)
			var out, errb bytes.Buffer
			sum, err := Publish(context.Background(), &Client{BaseURL: hs.URL, Retry: fastRetry}, strings.NewReader(in), PublishOptions{}, &out, &errb)
			if (err == nil) != (tc.failed == 0) || sum.Accepted != tc.accepted || sum.Failed != tc.failed || sum.Rejected != 0 || int(hits.Load()) != tc.hits {
				t.Fatalf("err %v, summary %+v, hits %d\n%s%s", err, sum, hits.Load(), out.String(), errb.String())
			}
			if want := strings.SplitAfter(in, "\n")[1]; string(last.Load().([]byte)) != want {
				t.Fatalf("resent %q, want event 1 %q", last.Load(), want)
			}
		})
	}
}
