package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/partitioning"
)

// The CloudEvents bridge through the binaries, on the suite's broker (real
// Apache Kafka in CI): dialect R events published to a gateway come out of
// the tenant's CloudEvents topic exactly once, read with read_committed,
// across a bridge SIGKILLed mid-run and restarted with its node id (which
// fences the killed one's open transaction): no event missing, none twice.
func TestCloudEventsBridgeExactlyOnceAcrossAKill(t *testing.T) {
	b := StartBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	prefix := strings.ReplaceAll(TopicName(t), "_", "-")
	naming := partitioning.Naming{Template: prefix + ".{tenant}.events"}
	common := []string{"--kafka-brokers", strings.Join(b.Seeds, ","), "--topic-template", naming.Template,
		"--topic-partitions", "3", "--topic-replication-factor", "1"}
	g := startGateway(t, common...)
	bridgeArgs := append([]string{"--role", "bridge", "--cloudevents-bridge", "--node-id", "bridge-1", "--cloudevents-max-capture", "full",
		"--cloudevents-bridge-group", prefix + "-bridges"}, common...)
	bridge := startGateway(t, bridgeArgs...)

	// The publisher runs throughout; the bridge is killed while events
	// flow (a third in) and restarted two thirds in, so the kill lands
	// mid-stream, most likely mid-transaction.
	const want = 4500
	third := make(chan struct{})
	twoThirds := make(chan struct{})
	published := make(chan error, 1)
	go func() {
		for i := 0; i < want; i += 50 {
			var batch []string
			for j := i; j < i+50; j++ {
				batch = append(batch, rEvent(fmt.Sprintf("ce_s%02d", j%30), j))
			}
			res, err := g.post(ctx, "/events", "application/x-ndjson", map[string]string{"AEP-Version": "0.1"}, strings.Join(batch, "\n")+"\n")
			if err != nil || res.status != 202 {
				published <- fmt.Errorf("publish: %v %d %s", err, res.status, res.body)
				return
			}
			switch i + 50 {
			case want / 3:
				close(third)
			case 2 * want / 3:
				close(twoThirds)
			}
			time.Sleep(20 * time.Millisecond)
		}
		published <- nil
	}()
	<-third
	bridge.kill()
	<-twoThirds
	startGateway(t, bridgeArgs...)
	if err := <-published; err != nil {
		t.Fatal(err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Seeds...), kgo.ConsumeTopics(naming.CloudEvents("default")),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.MetadataMinAge(200*time.Millisecond), kgo.MetadataMaxAge(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]int{}
	total := 0
	deadline := time.Now().Add(2 * time.Minute)
	for total < want && time.Now().Before(deadline) {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		fs.EachRecord(func(r *kgo.Record) {
			var ce struct {
				ID, Type, Specversion string
			}
			if err := json.Unmarshal(r.Value, &ce); err != nil || ce.Specversion != "1.0" || ce.Type != "dev.aep.tool.requested" {
				t.Errorf("not the CloudEvent of an R event: %s", r.Value)
			}
			seen[ce.ID]++
			total++
		})
	}
	// and nothing more arrives
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	total += cl.PollFetches(pctx).NumRecords()
	pcancel()
	missing, twice := 0, 0
	for i := range want {
		id := fmt.Sprintf("01JX9YB0%s%06d", strings.ToUpper(fmt.Sprintf("ce_s%02d", i%30)), i)
		switch seen[id] {
		case 0:
			missing++
		case 1:
		default:
			twice++
		}
	}
	t.Logf("CloudEvents topic: %d records read_committed for %d events; missing %d, more than once %d", total, want, missing, twice)
	if total != want || missing != 0 || twice != 0 {
		t.Fatalf("not exactly once: %d records, %d missing, %d more than once", total, missing, twice)
	}
}
