package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Off, every helper the hot paths call allocates nothing.
func TestOffCostsNoAllocation(t *testing.T) {
	if On() {
		t.Fatal("tracing is on without Setup")
	}
	ctx := context.Background()
	raw := []byte(`{"aep":"0.1","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`)
	rec := &kgo.Record{Topic: "t", Context: ctx}
	var d Deliveries
	allocs := testing.AllocsPerRun(100, func() {
		_, s := StartEvent(ctx, raw, "R", "acme", "id", "type")
		EndError(s, errors.ErrUnsupported)
		_, s = StartMessage(ctx, "R", "acme", 1)
		s.End()
		d.Start(rec, "sse", "acme", 1, 0)
		d.End(true)
		Ack(rec, "g", "applied")
		_ = KafkaHooks()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per event with tracing off, want 0", allocs)
	}
}

func TestEventTraceparent(t *testing.T) {
	for _, c := range []struct{ raw, want string }{
		{`{"aep":"0.1","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","data":{}}`, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{` {"data":{"traceparent":"nested"},"id":"x"}`, ""}, // only the top level counts
		{`{"traceparent":7}`, ""},
		{`not json`, ""},
		{`{"traceparent":"`, ""},
	} {
		if got := eventTraceparent([]byte(c.raw)); got != c.want {
			t.Errorf("eventTraceparent(%s) = %q, want %q", c.raw, got, c.want)
		}
	}
}

func TestSetupRefusesBadConfigAndStaysOffWithoutEndpoint(t *testing.T) {
	stop, err := Setup(context.Background(), Config{})
	if err != nil || On() {
		t.Fatalf("no endpoint: err %v, on %v", err, On())
	}
	_ = stop(context.Background())
	for _, c := range []Config{
		{Endpoint: "collector:4318", SampleRatio: 1},
		{Endpoint: "ftp://collector", SampleRatio: 1},
		{Endpoint: "http://collector:4318", SampleRatio: 1.5},
	} {
		if _, err := Setup(context.Background(), c); err == nil || On() {
			t.Errorf("Setup(%+v): err %v, on %v", c, err, On())
		}
	}
	stop, err = Setup(context.Background(), Config{Endpoint: "http://127.0.0.1:1", SampleRatio: 1})
	if err != nil || !On() || len(KafkaHooks()) != 1 {
		t.Fatalf("Setup: err %v, on %v", err, On())
	}
	if _, err := Setup(context.Background(), Config{Endpoint: "http://127.0.0.1:1"}); err == nil {
		t.Fatal("a second Setup succeeded")
	}
	_ = stop(context.Background()) // the export to a closed port fails; tracing is off all the same
	if On() {
		t.Fatal("still on after shutdown")
	}
	if err := stop(context.Background()); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
}

// An exporter failure is a line of the gateway's JSON log, not
// OpenTelemetry's plain-text default on standard error.
func TestExportErrorsAreJSONLogLines(t *testing.T) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusBadRequest) // not retryable: the export fails at once
	}))
	defer collector.Close()
	var buf syncBuffer
	stop, err := Setup(context.Background(), Config{Endpoint: collector.URL, SampleRatio: 1, Logger: zerolog.New(&buf)})
	if err != nil {
		t.Fatal(err)
	}
	_, span := StartMessage(context.Background(), "R", "acme", 1)
	span.End()
	_ = stop(context.Background())
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	found := false
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("a log line is not JSON: %q", l)
		}
		found = found || m["level"] == "warn" && strings.Contains(fmt.Sprint(m["error"]), "400")
	}
	if !found {
		t.Fatalf("no warning naming the failed export in the log: %q", buf.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
