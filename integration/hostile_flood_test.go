package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// procStatus reads a field of /proc/<pid>/status (VmRSS, in kB).
func procStatus(pid int, field string) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return -1
}

// One unauthenticated client opens AEP_HOSTILE_IDLE (default 2,000; the
// issue's figure is 20,000) keep-alive connections from one address
// against the default caps and tries to hold them all. Another tenant's
// SSE stream and ingest keep working during and after: every event
// ingested during the flood is accepted and delivered on the stream. It
// runs on the embedded broker (which must still accept Kafka connections
// afterwards) and on the external one when there is one (KAFKA_BROKERS in
// CI), where the gateway's descriptors are shared between the flood and
// its Kafka client connections.
func TestHostileIdleFloodAtDefaultCaps(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		dir := t.TempDir()
		g := floodIdle(t, dir, "--data-dir", filepath.Join(dir, "data"), "--embedded-kafka-listen", "127.0.0.1:0",
			"--topic-partitions", "2")
		// The embedded broker's listener survived the flood: a new Kafka
		// client connects and reads metadata.
		cl, err := kgo.NewClient(kgo.SeedBrokers(g.KafkaAddr))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cl.Ping(ctx); err != nil {
			t.Fatalf("the embedded broker at %s refuses Kafka clients after the flood: %v", g.KafkaAddr, err)
		}
	})
	t.Run("external", func(t *testing.T) {
		b := StartBroker(t)
		if b.Kind == KindEmbedded {
			t.Skip("no external broker (KAFKA_BROKERS unset, no Docker): covered by the embedded case")
		}
		prefix := strings.ReplaceAll(TopicName(t), "_", "-")
		floodIdle(t, t.TempDir(), "--kafka-brokers", strings.Join(b.Seeds, ","),
			"--topic-template", prefix+".{tenant}.events", "--topic-partitions", "2", "--topic-replication-factor", "1")
	})
}

// floodIdle starts a gateway with args (and an API key for tenant acme,
// kept in dir), runs the flood against it with the other tenant's traffic
// beside it, checks both, and returns the still-running gateway.
func floodIdle(t *testing.T, dir string, args ...string) *gatewayProc {
	t.Helper()
	total := 2000
	if v := os.Getenv("AEP_HOSTILE_IDLE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("AEP_HOSTILE_IDLE=%q", v)
		}
		total = n
	}
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte(keyFileLine("acme", "k-acme")), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, append(args, "--api-keys", keys)...)
	pid := g.cmd.Process.Pid
	addr := strings.TrimPrefix(g.URL, "http://")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	// The other tenant: a stream (from 127.0.0.3) and an ingest client
	// (from 127.0.0.2).
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/aep/events?types=task.*&session_id=sess_flood", nil)
	req.Header.Set("Authorization", "Bearer k-acme")
	stream, err := clientFrom("127.0.0.3").Do(req)
	if err != nil || stream.StatusCode != http.StatusOK {
		t.Fatalf("stream: %v %v", stream, err)
	}
	defer stream.Body.Close()
	ingester := clientFrom("127.0.0.2")
	ingest := func(i int) (int, time.Duration) {
		start := time.Now()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+"/aep/events", strings.NewReader(dEvent(i, "sess_flood")))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer k-acme")
		resp, err := ingester.Do(req)
		if err != nil {
			return 0, time.Since(start)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	if st, _ := ingest(0); st != http.StatusAccepted {
		t.Fatalf("ingest before the flood: %d", st)
	}
	rssBefore := procStatus(pid, "VmRSS")

	// The flood, from 64 workers; served connections are held open.
	var (
		next, served, refused, failed atomic.Int64
		mu                            sync.Mutex
		held                          []net.Conn
		wg                            sync.WaitGroup
	)
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	floodDone := make(chan struct{})
	start := time.Now()
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(total) {
				c, st := idleHealthz(addr)
				switch {
				case st == http.StatusOK:
					served.Add(1)
					mu.Lock()
					held = append(held, c)
					mu.Unlock()
					continue
				case st == http.StatusServiceUnavailable:
					refused.Add(1)
				default:
					failed.Add(1) // closed without an answer (every refusal slot busy)
				}
				if c != nil {
					c.Close()
				}
			}
		}()
	}
	go func() { wg.Wait(); close(floodDone) }()

	// Meanwhile the other tenant ingests, one event every 50 ms.
	sent, accepted := 1, 1
	var worst time.Duration
	var rssPeak int64
	for flooding := true; flooding; {
		select {
		case <-floodDone:
			flooding = false
		case <-time.After(50 * time.Millisecond):
		}
		st, took := ingest(sent)
		sent++
		if st == http.StatusAccepted {
			accepted++
		}
		worst = max(worst, took)
		rssPeak = max(rssPeak, procStatus(pid, "VmRSS"))
	}
	took := time.Since(start)
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	t.Logf("%d connections from one address in %s: %d held, %d refused with 503, %d closed without an answer; gateway fds %d",
		total, took.Round(time.Millisecond), served.Load(), refused.Load(), failed.Load(), len(fds))
	t.Logf("other tenant during the flood: %d/%d ingests accepted, slowest %s; gateway RSS %d kB before, %d kB peak",
		accepted, sent, worst.Round(time.Millisecond), rssBefore, rssPeak)
	if served.Load() > 512 || served.Load()+refused.Load()+failed.Load() != int64(total) {
		t.Fatalf("per-address cap 512: %d held", served.Load())
	}
	if accepted != sent {
		t.Fatalf("the other tenant's ingest failed during the flood: %d of %d accepted", accepted, sent)
	}
	// After: one more event, and the stream has every one.
	if st, _ := ingest(sent); st != http.StatusAccepted {
		t.Fatalf("ingest after the flood: %d", st)
	}
	sent++
	msgs := readSSE(ctx, t, stream, sent)
	if len(msgs) != sent {
		t.Fatalf("stream delivered %d of %d events", len(msgs), sent)
	}
	return g
}

// keyFileLine is an --api-keys line for key.
func keyFileLine(tenant, key string) string {
	d := sha256.Sum256([]byte(key))
	return tenant + " sha256:" + hex.EncodeToString(d[:]) + "\n"
}
