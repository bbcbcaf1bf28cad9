package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A consumer that reads a few events and leaves is not charged for the
// rest (issue 23): a subscription of 200 events consumed six times with
// "aepctl consume --count 10 --ack" (read ten, ack them, leave), through
// the built binaries. Every run prints ten events and no dead letter, the
// runs together acknowledge sixty distinct events, and the subscription's
// lag is the 140 left. Before max_ack_pending and hand-over counting the
// fourth run printed "0 events, 0 redelivered, 170 dead-lettered".
func TestAepctlConsumeCountAckRepeated(t *testing.T) {
	b := StartBroker(t)
	prefix := strings.ReplaceAll(TopicName(t), "_", "-")
	g := startGateway(t, "--kafka-brokers", strings.Join(b.Seeds, ","),
		"--topic-template", prefix+".{tenant}.events", "--topic-partitions", "3", "--topic-replication-factor", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	id := strings.TrimSpace(aepctlOK(ctx, t, g, "", "subscriptions", "create", "--types", "task.*", "--max-attempts", "3"))
	var lines []string
	for i := range 200 {
		lines = append(lines, dEvent(i, fmt.Sprintf("sess_cnt_%d", i%4)))
	}
	aepctlOK(ctx, t, g, strings.Join(lines, "\n")+"\n", "publish")

	summary := regexp.MustCompile(`consume: (\d+) events, (\d+) redelivered, (\d+) dead-lettered`)
	acked := map[string]bool{}
	for run := 1; run <= 6; run++ {
		var out, errb bytes.Buffer
		cmd := aepctlCmd(ctx, t, g, "", "consume", "--subscription", id, "--ack", "--count", "10", "--timeout", "60s", "-o", "ndjson")
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("run %d: %v\n%s", run, err, errb.String())
		}
		m := summary.FindStringSubmatch(errb.String())
		if m == nil || m[1] != "10" || m[3] != "0" {
			t.Fatalf("run %d: want 10 events and 0 dead-lettered:\n%s", run, errb.String())
		}
		t.Logf("run %d: %s", run, m[0])
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var v struct{ ID, Type string }
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				t.Fatalf("run %d printed %q: %v", run, line, err)
			}
			if v.Type == "event.dead_lettered" {
				t.Fatalf("run %d: a dead letter: %s", run, line)
			}
			if v.Type == "task.progress" {
				acked[v.ID] = true
			}
		}
	}
	if len(acked) != 60 {
		t.Errorf("six runs acknowledged %d distinct events, want 60", len(acked))
	}
	var s struct {
		Lag *int64 `json:"lag"`
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		raw := aepctlOK(ctx, t, g, "", "subscriptions", "get", id, "-o", "json")
		if err := json.Unmarshal([]byte(raw), &s); err != nil || s.Lag == nil {
			t.Fatalf("subscriptions get -o json: %v: %s", err, raw)
		}
		if *s.Lag == 140 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lag after six runs: %s, want 140", raw)
		}
	}
	if dl := aepctlOK(ctx, t, g, "", "dead-letters", "-o", "json"); strings.Contains(dl, id) {
		t.Errorf("dead letters of %s:\n%s", id, dl)
	}
}
