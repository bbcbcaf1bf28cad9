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

	"github.com/coder/websocket"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
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
// the process exits 0. Dialect D's streaming clients keep receiving during
// the interval, every event ingested meanwhile included, and then hear how
// to resume: subscription.expired, reason shutdown, with the cursor of the
// last event they got (SSE: the last message before the body ends;
// WebSocket: before the 1001).
func TestDrainDelayKeepsServingWhileNotReady(t *testing.T) {
	const delay = 3 * time.Second
	g := startGateway(t, "--data-dir", t.TempDir(), "--embedded-kafka-listen", "127.0.0.1:0", "--topic-partitions", "2",
		"--drain-delay", delay.String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sse := gatewaytest.MustOpenSSE(t, g.URL+"/aep/events?types=task.*", gatewaytest.SSEOptions{Buffer: 1024})
	ws := gatewaytest.DialWSD(t, gatewaytest.WSURL(g.URL, "/aep"), gatewaytest.WSOptions{})
	wsSub := ws.MustSubscribe("evt_drain_sub", `{"types":["task.*"],"delivery_mode":"replayable"}`)
	if res, err := g.post(ctx, "/aep/events", "application/json", nil, dEvent(0, "drain")); err != nil || res.status != 202 {
		t.Fatalf("before SIGTERM: %v %d %s", err, res.status, res.body)
	}
	if m := sse.NextSkipping("stream open", "heartbeat"); m.Event != "task.progress" || !strings.Contains(m.Data, "evt_drain_0000") {
		t.Fatalf("SSE before SIGTERM: %+v", m)
	}
	if m := ws.Event(); m.ID != "evt_drain_0000" {
		t.Fatalf("WebSocket before SIGTERM: %s", m.Raw)
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
	checkDrainNoticeSSE(t, sse, served)
	checkDrainNoticeWS(t, ws, wsSub, served)
	t.Logf("readyz 503 %v after SIGTERM; %d ingest requests served while draining; listener closed %v after SIGTERM; D SSE and WebSocket clients got every event and subscription.expired (shutdown)",
		notReadyAt.Sub(term).Round(time.Millisecond), served, closedAfter.Round(time.Millisecond))
}

// checkDrainNoticeSSE reads the rest of a draining node's D SSE stream:
// the served events ingested during the drain (evt_drain_0001..), then
// subscription.expired (reason shutdown, the last event's id as cursor,
// retryable, a message naming Last-Event-ID), then the end of the body.
func checkDrainNoticeSSE(t *testing.T, sse *gatewaytest.SSEStream, served int) {
	t.Helper()
	rest, err := sse.End(30 * time.Second)
	var data []gatewaytest.SSEMessage
	for _, m := range rest {
		if m.HasData {
			data = append(data, m)
		}
	}
	if len(data) != served+1 {
		t.Fatalf("SSE after SIGTERM: %d messages (read error %v), want the %d events ingested while draining and the notice", len(data), err, served)
	}
	lastID := ""
	for i, m := range data[:served] {
		if want := fmt.Sprintf("evt_drain_%04d", i+1); m.Event != "task.progress" || !strings.Contains(m.Data, want) {
			t.Fatalf("SSE message %d after SIGTERM: %+v, want %s", i, m, want)
		}
		lastID = m.ID
	}
	n := data[served]
	var env struct {
		Payload struct {
			Reason string `json:"reason"`
			Cursor string `json:"cursor"`
			Error  struct {
				Retryable bool   `json:"retryable"`
				Message   string `json:"message"`
			} `json:"error"`
		} `json:"payload"`
	}
	if n.Event != "subscription.expired" || json.Unmarshal([]byte(n.Data), &env) != nil || env.Payload.Reason != "shutdown" ||
		env.Payload.Cursor == "" || env.Payload.Cursor != lastID || !env.Payload.Error.Retryable ||
		!strings.Contains(env.Payload.Error.Message, "Last-Event-ID") {
		t.Fatalf("SSE's last message: %+v; want subscription.expired, reason shutdown, cursor %q (the last event's id)", n, lastID)
	}
}

// checkDrainNoticeWS is checkDrainNoticeSSE for a D WebSocket subscription:
// the events, subscription.expired of sub (cursor: the last event's
// delivery.cursor), then close 1001.
func checkDrainNoticeWS(t *testing.T, ws *gatewaytest.WSD, sub string, served int) {
	t.Helper()
	rest, status := ws.End(30 * time.Second)
	if len(rest) != served+1 {
		t.Fatalf("WebSocket after SIGTERM: %d messages (close %d), want the %d events ingested while draining and the notice", len(rest), status, served)
	}
	lastCursor := ""
	for i, b := range rest[:served] {
		m, err := gatewaytest.DecodeD(b)
		if want := fmt.Sprintf("evt_drain_%04d", i+1); err != nil || m.ID != want || !m.Delivered() {
			t.Fatalf("WebSocket message %d after SIGTERM: %s, want %s", i, b, want)
		}
		lastCursor = m.Delivery.Cursor
	}
	n, err := gatewaytest.DecodeD(rest[served])
	errObj, _ := n.Payload["error"].(map[string]any)
	if err != nil || n.Type != "subscription.expired" || n.Str("subscription_id") != sub || n.Str("reason") != "shutdown" ||
		n.Str("cursor") != lastCursor || errObj["retryable"] != true {
		t.Fatalf("WebSocket's last message: %s; want subscription.expired of %s, reason shutdown, cursor %s", rest[served], sub, lastCursor)
	}
	if status != websocket.StatusGoingAway {
		t.Fatalf("WebSocket close %d, want 1001", status)
	}
}
