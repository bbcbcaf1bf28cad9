package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestReadyzNamesWorkersModeTopicFailure: in --live-delivery workers a
// node creates the registry and delivery topics on first use; when that
// fails, the subscribe is refused and /readyz answers 503 naming the
// topic, as it does for tenant topics.
func TestReadyzNamesWorkersModeTopicFailure(t *testing.T) {
	// Kafka refuses a topic whose name differs from an existing one only in
	// '.' vs '_': the registry topic aep_live_delivery collides with the
	// delivery topic aep.live.delivery, so the workers' topics cannot both
	// be created (the node tries when its engine starts, then again at its
	// first live stream).
	base := startGateway(t, "--live-delivery", "workers", "--live-registry-topic", "aep_live_delivery")
	get := func(path string) (int, string) {
		t.Helper()
		resp := do(t, http.MethodGet, base+path, "", "")
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp.StatusCode, string(b)
	}
	// The broker answers first (the feed's own start, with the engine, may
	// already have failed and be reported: either is right).
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st, body := get("/readyz"); st == http.StatusOK || strings.Contains(body, "provisioning") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the broker never answered")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ev := `{"aep_version":"0.1","id":"evt_ready_1","type":"task.progress","source":"agent:t","session_id":"s1","created_at":"2026-07-09T10:00:00Z","payload":{}}`
	if resp := do(t, http.MethodPost, base+"/aep/events", "application/json", ev); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("ingest: %d", resp.StatusCode)
	} else {
		resp.Body.Close()
	}
	sub := do(t, http.MethodGet, base+"/aep/events?types=*", "", "") // answers once its headers are written
	sub.Body.Close()
	if sub.StatusCode < 500 {
		t.Fatalf("subscribe with the registry topic uncreatable: %d, want a 5xx", sub.StatusCode)
	}
	st, body := get("/readyz")
	if st != http.StatusServiceUnavailable || !strings.Contains(body, "provisioning") ||
		!(strings.Contains(body, "aep_live_delivery") || strings.Contains(body, "aep.live.delivery")) {
		t.Fatalf("/readyz after the failed provisioning: %d %s", st, body)
	}
}
