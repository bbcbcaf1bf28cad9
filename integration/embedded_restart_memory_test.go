package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// statedBound is the restart memory the gateway prints at start for one
// tenant (base + per tenant) and the disk a tenant keeps at most; ok is
// false when it printed none.
func statedBound(g *gatewayProc) (memory, disk int64, ok bool) {
	for _, line := range strings.Split(g.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		if msg, _ := m["message"].(string); !strings.HasPrefix(msg, "embedded kafka: each tenant keeps") {
			continue
		}
		base, _ := m["base_memory_bytes"].(float64)
		per, _ := m["restart_memory_bytes_per_tenant"].(float64)
		d, _ := m["tenant_disk_bytes"].(float64)
		return int64(base + per), int64(d), true
	}
	return 0, 0, false
}

func dirBytes(t *testing.T, dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// fillTenant writes n records of tenant "default" straight to the
// embedded broker at addr (faster than HTTP ingest; the broker keeps the
// same bytes either way): AEP events whose payload is the hex of pad
// random bytes, keyed by 64 sessions.
func fillTenant(ctx context.Context, t *testing.T, addr string, n, pad int, opts ...kgo.Opt) {
	t.Helper()
	fillTenantWith(ctx, t, addr, n, pad, false, opts...)
}

// fillTenantWith is fillTenant whose pad is random hex (about 2x under
// lz4, like real events), or with compressible a run of one repeated
// word (far more: what an attacker sends to make fetches decode large).
func fillTenantWith(ctx context.Context, t *testing.T, addr string, n, pad int, compressible bool, opts ...kgo.Opt) {
	t.Helper()
	fillTopic(ctx, t, addr, partitioning.Naming{}.Events("default"), n, pad, compressible, opts...)
}

// fillTopic is fillTenantWith into the given topic.
func fillTopic(ctx context.Context, t *testing.T, addr, topic string, n, pad int, compressible bool, opts ...kgo.Opt) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rnd := rand.New(rand.NewPCG(1, 2))
	failed := make(chan error, 1)
	raw := make([]byte, pad)
	for i := range n {
		sess := "s" + strconv.Itoa(i%64)
		a := aep.Attrs{Dialect: aep.DialectD, ID: "evt_" + strconv.Itoa(i), Type: "task.progress", Source: "agent:mem", Session: sess}
		for j := range raw {
			if compressible {
				raw[j] = "agent"[j%5]
			} else {
				raw[j] = byte(rnd.Uint32())
			}
		}
		pad := fmt.Sprintf("%x", raw)
		if compressible {
			pad = string(raw) + string(raw)
		}
		v := fmt.Sprintf(`{"aep_version":"0.1","id":"evt_%d","type":"task.progress","source":"agent:mem","session_id":"%s","created_at":"2026-07-09T10:00:00Z","payload":{"pad":"%s"}}`, i, sess, pad)
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(sess), Value: []byte(v), Headers: partitioning.AppendHeaders(nil, &a)},
			func(_ *kgo.Record, err error) {
				if err != nil {
					select {
					case failed <- err:
					default:
					}
				}
			})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-failed:
		t.Fatalf("produce: %v", err)
	default:
	}
}

// readAll reads the tenant's events topic from its first kept offset to
// its end through the embedded broker; it returns the records read.
func readAll(ctx context.Context, t *testing.T, addr string) int {
	t.Helper()
	topic := partitioning.Naming{}.Events("default")
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { left[o.Partition] = o.Offset })
	n := 0
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("full read: %v (%d partitions left)", err, len(left))
		}
		fs.EachRecord(func(r *kgo.Record) {
			n++
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
		})
	}
	return n
}

// The embedded broker's restart memory is bounded by configuration, not by
// the data: after AEP_RESTART_MIB (default 1024) MiB written to one tenant,
// retention keeps the tenant at its stated disk bound, and restarts (clean,
// then after SIGKILL, when kfake replays every segment) stay under the
// stated memory bound: RSS after ready, peak RSS while loading, and RSS
// after one full read of the topic. Before the bound (an unbounded topic),
// a restart held about twice the data dir.
func TestEmbeddedRestartMemoryBounded(t *testing.T) {
	mib := envInt(t, "AEP_RESTART_MIB", 1024)
	dir := t.TempDir() + "/data"
	args := []string{"--data-dir", dir, "--embedded-kafka-listen", "127.0.0.1:0", "--topic-partitions", "4"}
	g := startGateway(t, args...)
	memBound, diskBound, ok := statedBound(g)
	if !ok {
		// Carry on with the bound of today's defaults, so that a run of an
		// older binary (AEP_GATEWAY_BIN) shows its figures too.
		t.Error("the gateway stated no memory bound for the embedded broker at start")
		memBound, diskBound = (96+224)<<20, 112<<20
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The tenant's topics, as the gateway makes them.
	if r, err := g.post(ctx, "/aep/events", "application/x-ndjson", nil, topicCheckEvent); err != nil || r.status != 202 {
		t.Fatalf("publish: %v %+v", err, r)
	}
	uncompressed := []kgo.Opt{kgo.ProducerLinger(5 * time.Millisecond), kgo.ProducerBatchCompression(kgo.NoCompression())}
	start := time.Now()
	fillTenant(ctx, t, g.KafkaAddr, mib<<10, 400, uncompressed...)
	wrote := time.Since(start)
	kafkaDir := filepath.Join(dir, "kafka")
	written := dirBytes(t, kafkaDir)
	// Retention runs every 15 s; index files, the subscription journal and
	// kfake's own state add a little.
	slack := int64(16 << 20)
	keptBounded := func() {
		t.Helper()
		if !gatewaytest.Eventually(time.Minute, 100*time.Millisecond, func() bool { return dirBytes(t, kafkaDir) <= diskBound+slack }) {
			t.Errorf("retention did not bring the data dir (%d MiB) to the stated bound %d MiB", dirBytes(t, kafkaDir)>>20, diskBound>>20)
		}
	}
	keptBounded()
	kept := dirBytes(t, kafkaDir)
	t.Logf("wrote %d MiB of records in %v; data dir %d MiB right after, %d MiB once retention ran (stated disk bound %d MiB)",
		mib, wrote.Round(time.Millisecond), written>>20, kept>>20, diskBound>>20)

	check := func(how string, g *gatewayProc) {
		t.Helper()
		pid := g.cmd.Process.Pid
		ready, peak := procStatus(pid, "VmRSS")<<10, procStatus(pid, "VmHWM")<<10
		start := time.Now()
		n := readAll(ctx, t, g.KafkaAddr)
		read := procStatus(pid, "VmRSS") << 10
		peak = max(peak, procStatus(pid, "VmHWM")<<10)
		t.Logf("%s: RSS %d MiB after ready, %d MiB after reading %d records in %v, peak %d MiB (stated bound %d MiB)",
			how, ready>>20, read>>20, n, time.Since(start).Round(time.Millisecond), peak>>20, memBound>>20)
		if peak > memBound {
			t.Errorf("%s: peak RSS %d MiB over the stated bound %d MiB", how, peak>>20, memBound>>20)
		}
	}
	g.stop()
	g = startGateway(t, args...)
	check("clean restart", g)
	// More writes after the clean start make kfake's snapshot stale, so a
	// crash is followed by a full replay of every segment (the costlier
	// load).
	fillTenant(ctx, t, g.KafkaAddr, 64<<10, 400, uncompressed...)
	keptBounded()
	g.kill()
	g = startGateway(t, args...)
	check("restart after SIGKILL (full replay)", g)
}
