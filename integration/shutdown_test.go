package integration

import (
	"context"
	"encoding/json"
	"fmt"
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
