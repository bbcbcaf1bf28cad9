package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A failing readiness check (the transport Hub's poller) turns /readyz to
// 503 with its error under its name while it fails, though the broker
// answers; it is ready again once the check passes.
func TestReadyzReportsAFailingCheck(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	var pollerErr atomic.Pointer[error]
	check := ReadinessCheck{Name: "poller", Err: func() error {
		if e := pollerErr.Load(); e != nil {
			return *e
		}
		return nil
	}}
	rd := newReadiness(cl, nil, []ReadinessCheck{check}, 50*time.Millisecond, newMetrics(prometheus.NewRegistry()))
	rd.start()
	t.Cleanup(rd.stop)
	hs := httptest.NewServer(http.HandlerFunc(rd.handle))
	t.Cleanup(hs.Close)
	get := func() (int, map[string]string) {
		t.Helper()
		r, err := http.Get(hs.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		var body map[string]string
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		return r.StatusCode, body
	}
	waitReady := func() {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if st, _ := get(); st == http.StatusOK {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("never ready")
			}
		}
	}
	waitReady()
	e := errors.New("netpoll: epoll_wait: bad file descriptor")
	pollerErr.Store(&e)
	if st, body := get(); st != http.StatusServiceUnavailable || body["poller"] != e.Error() || body["status"] != "unavailable" {
		t.Fatalf("with the poller failed: %d %v, want 503 naming it", st, body)
	}
	pollerErr.Store(nil)
	waitReady()
}
