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
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/internal/aepclient"
	"github.com/aep-gateway/aep-gateway/internal/clitest"
	"github.com/aep-gateway/aep-gateway/internal/eventgen"
)

// genLines returns n events of dialect d as NDJSON.
func genLines(t *testing.T, d aep.Dialect, n int) string {
	t.Helper()
	var b bytes.Buffer
	if err := eventgen.WriteEvents(context.Background(), &b, eventgen.NewGenerator(eventgen.GenOptions{Dialect: d, Sessions: 3}), n); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

var fastRetry = aepclient.RetryPolicy{Attempts: 4, Base: time.Millisecond, Max: 5 * time.Millisecond}

func TestPublishMixedDialectsAllAccepted(t *testing.T) {
	g := clitest.NewGateway(t)
	// R, a blank line, D, then R again: three runs of one dialect each.
	in := genLines(t, aep.DialectR, 12) + "\n" + genLines(t, aep.DialectD, 7) + genLines(t, aep.DialectR, 3)
	var out, errb bytes.Buffer
	sum, err := Publish(context.Background(), &aepclient.Client{BaseURL: g.URL, Retry: fastRetry}, strings.NewReader(in),
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
	if n := g.Records(clitest.DevTopic); n != 22 {
		t.Fatalf("topic holds %d records, want 22", n)
	}
	if got := strings.Count(out.String(), "\n"); got != 7 { // a line per batch and the total
		t.Fatalf("%d summary lines, want 7:\n%s", got, out.String())
	}
}

func TestPublishRejectedLineExitsOne(t *testing.T) {
	g := clitest.NewGateway(t)
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
	code := run(context.Background(), []string{"publish", "--url", g.URL, file}, nil, &out, &errb)
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
	if n := g.Records(clitest.DevTopic); n != 2 {
		t.Fatalf("topic holds %d records, want 2", n)
	}
}

func TestPublishRetries503WithSameBytes(t *testing.T) {
	for _, d := range []aep.Dialect{aep.DialectR, aep.DialectD} {
		t.Run(d.String(), func(t *testing.T) {
			g := clitest.NewGateway(t)
			f, u := clitest.NewFlakyProxy(t, g.URL, 2)
			var out, errb bytes.Buffer
			sum, err := Publish(context.Background(), &aepclient.Client{BaseURL: u, Retry: fastRetry}, strings.NewReader(genLines(t, d, 10)),
				PublishOptions{Dialect: d}, &out, &errb)
			if err != nil {
				t.Fatalf("Publish: %v\n%s%s", err, out.String(), errb.String())
			}
			if sum.Accepted != 10 || sum.Requests != 3 || f.Hits.Load() != 3 {
				t.Fatalf("accepted %d, requests %d, proxy hits %d; want 10, 3, 3", sum.Accepted, sum.Requests, f.Hits.Load())
			}
			first := <-f.Bodies
			for range 2 {
				if b := <-f.Bodies; !bytes.Equal(b, first) {
					t.Fatal("a retry sent different bytes")
				}
			}
			if n := strings.Count(errb.String(), "retrying in"); n != 2 {
				t.Fatalf("%d retry notes on stderr, want 2:\n%s", n, errb.String())
			}
			if n := g.Records(clitest.DevTopic); n != 10 {
				t.Fatalf("topic holds %d records, want 10", n)
			}
		})
	}
}

func TestPublishRetriesRateLimit(t *testing.T) {
	g := clitest.NewGateway(t)
	f, u := clitest.NewFlakyProxy(t, g.URL, 1)
	f.Status = http.StatusTooManyRequests
	var out, errb bytes.Buffer
	sum, err := Publish(context.Background(), &aepclient.Client{BaseURL: u, Retry: fastRetry}, strings.NewReader(genLines(t, aep.DialectR, 4)),
		PublishOptions{}, &out, &errb)
	if err != nil || sum.Accepted != 4 || f.Hits.Load() != 2 {
		t.Fatalf("err %v, summary %+v, hits %d", err, sum, f.Hits.Load())
	}
}

func TestPublishGivesUpAfterAttempts(t *testing.T) {
	g := clitest.NewGateway(t)
	f, u := clitest.NewFlakyProxy(t, g.URL, 100)
	var out, errb bytes.Buffer
	sum, err := Publish(context.Background(), &aepclient.Client{BaseURL: u, Retry: fastRetry}, strings.NewReader(genLines(t, aep.DialectR, 5)),
		PublishOptions{}, &out, &errb)
	if !errors.Is(err, errRejected) {
		t.Fatalf("err %v, want errRejected", err)
	}
	if sum.Failed != 5 || sum.Accepted != 0 || f.Hits.Load() != int32(fastRetry.Attempts) {
		t.Fatalf("failed %d accepted %d hits %d; want 5, 0, %d", sum.Failed, sum.Accepted, f.Hits.Load(), fastRetry.Attempts)
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
	sum, err := Publish(context.Background(), &aepclient.Client{BaseURL: hs.URL, Token: "nope", Retry: fastRetry},
		strings.NewReader(genLines(t, aep.DialectR, 3)), PublishOptions{Batch: 2}, &out, &errb)
	var apiErr *aepclient.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized || apiErr.Code != "unauthorized" || hits.Load() != 1 {
		t.Fatalf("err %v, hits %d; want the 401 as an aepclient.APIError after 1 request", err, hits.Load())
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
	sum, err := Publish(context.Background(), &aepclient.Client{BaseURL: "http://" + addr, Retry: fastRetry},
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
			sum, err := Publish(context.Background(), &aepclient.Client{BaseURL: hs.URL, Retry: fastRetry}, strings.NewReader(in), PublishOptions{}, &out, &errb)
			if (err == nil) != (tc.failed == 0) || sum.Accepted != tc.accepted || sum.Failed != tc.failed || sum.Rejected != 0 || int(hits.Load()) != tc.hits {
				t.Fatalf("err %v, summary %+v, hits %d\n%s%s", err, sum, hits.Load(), out.String(), errb.String())
			}
			if want := strings.SplitAfter(in, "\n")[1]; string(last.Load().([]byte)) != want {
				t.Fatalf("resent %q, want event 1 %q", last.Load(), want)
			}
		})
	}
}
