package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// SIGTERM while clients are publishing: the gateway stops accepting, lets
// every in-flight request finish its Kafka write and answer, and exits 0.
// Every event that got a 202 is in the log after a restart.
func TestGracefulShutdownFinishesInFlightWrites(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--data-dir", dir, "--embedded-kafka-listen", "127.0.0.1:0", "--topic-partitions", "4"}
	g := startGateway(t, args...)

	var (
		mu       sync.Mutex
		accepted = map[string]bool{}
		answered int
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := 0; b < 200 && ctx.Err() == nil; b++ {
				var body strings.Builder
				for i := 0; i < 20; i++ {
					body.WriteString(dEvent(b*20+i, fmt.Sprintf("w%d", w)) + "\n")
				}
				res, err := g.post(ctx, "/aep/events", "application/x-ndjson", nil, body.String())
				if err != nil {
					return // the listener is closed: no request was taken
				}
				var rep ingestReply
				if res.status != 202 || json.Unmarshal(res.body, &rep) != nil || rep.Accepted != 20 {
					t.Errorf("in-flight request answered %d %s", res.status, res.body)
					return
				}
				mu.Lock()
				answered++
				for _, p := range rep.Positions {
					accepted[p.ID] = true
				}
				mu.Unlock()
			}
		}()
	}
	// Let traffic flow, then ask the process to stop.
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := answered
		mu.Unlock()
		if n >= 30 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	wg.Wait()
	select {
	case <-g.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("gateway did not exit after SIGTERM")
	}
	if g.waitErr != nil {
		t.Fatalf("gateway exited with %v:\n%s", g.waitErr, g.logs.String())
	}
	if !strings.Contains(g.logs.String(), "aep-gateway stopped") {
		t.Fatalf("no clean stop in the logs:\n%s", g.logs.String())
	}
	if len(accepted) == 0 {
		t.Fatal("no request was accepted before the shutdown")
	}

	g2 := startGateway(t, args...)
	recs := readTopic(t, nil, []string{g2.KafkaAddr}, "aep.default.events", len(accepted))
	found := map[string]bool{}
	for _, r := range recs {
		found[hdr(r, "aep-id")] = true
	}
	for id := range accepted {
		if !found[id] {
			t.Fatalf("event %s got a 202 before the shutdown and is not in the log", id)
		}
	}
	g2.stop()
}

// A drain a load balancer can see (--drain-delay): after SIGTERM, /readyz
// answers 503 "draining" at once while ingest is still served for the
// interval; only then does the listener close (connections refused), and
// the process exits 0.
func TestDrainDelayKeepsServingWhileNotReady(t *testing.T) {
	const delay = 3 * time.Second
	g := startGateway(t, "--data-dir", t.TempDir(), "--embedded-kafka-listen", "127.0.0.1:0", "--topic-partitions", "2",
		"--drain-delay", delay.String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if res, err := g.post(ctx, "/aep/events", "application/json", nil, dEvent(0, "drain")); err != nil || res.status != 202 {
		t.Fatalf("before SIGTERM: %v %d %s", err, res.status, res.body)
	}
	term := time.Now()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var notReadyAt time.Time
	for notReadyAt.IsZero() {
		if time.Since(term) > delay {
			t.Fatalf("/readyz never answered 503 within the drain delay")
		}
		resp, err := http.Get(g.URL + "/readyz")
		if err != nil {
			t.Fatalf("/readyz refused during the drain delay (%v after SIGTERM): %v", time.Since(term), err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(b), "draining") {
			notReadyAt = time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Not ready, still serving: ingest is taken until the delay is over.
	served := 0
	for i := 1; time.Since(term) < delay-500*time.Millisecond; i++ {
		res, err := g.post(ctx, "/aep/events", "application/json", nil, dEvent(i, "drain"))
		if err != nil || res.status != 202 {
			t.Fatalf("ingest %v after SIGTERM (draining): %v %d %s", time.Since(term), err, res.status, res.body)
		}
		served++
		time.Sleep(50 * time.Millisecond)
	}
	// Then the listener closes.
	refused := false
	for !refused && time.Since(term) < delay+15*time.Second {
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(g.URL, "http://"), time.Second)
		if err != nil {
			refused = true
			break
		}
		c.Close()
		time.Sleep(50 * time.Millisecond)
	}
	closedAfter := time.Since(term)
	if !refused || closedAfter < delay {
		t.Fatalf("listener closed after %v (refused %v), want after the %v drain delay", closedAfter, refused, delay)
	}
	select {
	case <-g.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("no exit after the drain")
	}
	if g.waitErr != nil {
		t.Fatalf("exit: %v", g.waitErr)
	}
	t.Logf("readyz 503 %v after SIGTERM; %d ingest requests served while draining; listener closed %v after SIGTERM",
		notReadyAt.Sub(term).Round(time.Millisecond), served, closedAfter.Round(time.Millisecond))
}
