package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// topicTemplate is a --topic-template no other test or node uses, so that
// the development tenant's topics on a shared broker are this test's own;
// they are deleted when t ends.
func topicTemplate(t *testing.T, adm *kadm.Client) partitioning.Naming {
	t.Helper()
	var r [4]byte
	_, _ = rand.Read(r[:])
	n := partitioning.Naming{Template: "it-topics-" + hex.EncodeToString(r[:]) + ".{tenant}.events"}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		names := []string{n.Events("default"), n.DeadLetter("default"), n.Index("default"), n.Subscriptions("default")}
		resps, err := adm.DeleteTopics(ctx, names...)
		if err != nil {
			t.Logf("delete topics: %v", err)
			return
		}
		for _, r := range resps {
			if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
				t.Logf("delete topic %s: %v", r.Topic, r.Err)
			}
		}
	})
	return n
}

func readyz(t *testing.T, g *gatewayProc) (int, string) {
	t.Helper()
	resp, err := http.Get(g.URL + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func metricsText(t *testing.T, g *gatewayProc) string {
	t.Helper()
	resp, err := http.Get(g.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

const topicCheckEvent = `{"aep_version":"0.1","id":"evt_tc","type":"task.progress","source":"agent:tc","session_id":"s1","created_at":"2026-07-09T10:00:00Z","payload":{}}`

// A tenant topic pre-created by an operator with 2 partitions, compaction
// and 1 h retention (issue 29): the gateway used it silently. Now the
// tenant is refused with the reason, /readyz is not ready naming it, the
// metric and the log say it; once the operator fixes the policy, the
// tenant is served and the remaining differences are warnings.
func TestPreCreatedNonConformingTopic(t *testing.T) {
	b := StartBroker(t)
	adm := b.Admin(t)
	n := topicTemplate(t, adm)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	str := func(s string) *string { return &s }
	for _, s := range []struct {
		name  string
		parts int32
		cfg   map[string]*string
	}{
		{n.Events("default"), 2, map[string]*string{"cleanup.policy": str("compact"), "retention.ms": str("3600000")}},
		{n.DeadLetter("default"), 2, map[string]*string{"cleanup.policy": str("delete")}},
		{n.Index("default"), 2, map[string]*string{"cleanup.policy": str("compact")}},
		{n.Subscriptions("default"), 1, map[string]*string{"cleanup.policy": str("compact")}},
	} {
		resp, err := adm.CreateTopic(ctx, s.parts, 1, s.cfg, s.name)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatalf("create %s: %v", s.name, err)
		}
	}
	g := startGateway(t, "--kafka-brokers", strings.Join(b.Seeds, ","), "--topic-template", n.Template,
		"--topic-partitions", "4", "--topic-replication-factor", "1")

	r, err := g.post(ctx, "/aep/events", "application/x-ndjson", nil, topicCheckEvent)
	if err != nil || r.status == http.StatusAccepted || !strings.Contains(string(r.body), "cleanup.policy") {
		t.Fatalf("publish to a compacted topic: %v %d %s", err, r.status, r.body)
	}
	if code, body := readyz(t, g); code != http.StatusServiceUnavailable || !strings.Contains(body, "cleanup.policy is compact") {
		t.Fatalf("/readyz = %d %s, want 503 naming the compaction", code, body)
	}
	m := metricsText(t, g)
	if !strings.Contains(m, `aep_topic_config_mismatches{kind="events",setting="cleanup.policy",severity="fatal"} 1`) ||
		!strings.Contains(m, `aep_topic_config_mismatches{kind="events",setting="partitions",severity="warning"} 1`) ||
		!strings.Contains(m, `aep_topic_config_mismatches{kind="events",setting="retention.ms",severity="warning"} 1`) {
		t.Fatalf("mismatch metrics missing:\n%s", grepLines(m, "aep_topic_config"))
	}
	if !strings.Contains(g.logs.String(), "tenant topic unusable as it is") {
		t.Fatal("no error log line for the compacted topic")
	}

	// The operator fixes the policy; within the recheck the tenant is served.
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: str("delete")}}, n.Events("default")); err != nil {
		t.Fatal(err)
	}
	gatewaytest.PollFor(t, 30*time.Second, "the tenant served after the fix", func() bool {
		r, err := g.post(ctx, "/aep/events", "application/x-ndjson", nil, topicCheckEvent)
		return err == nil && r.status == http.StatusAccepted
	})
	code, body := readyz(t, g)
	if code != http.StatusOK || !strings.Contains(body, "topic_warnings") || !strings.Contains(body, "retention.ms") {
		t.Fatalf("/readyz after the fix = %d %s, want ready with the retention warning", code, body)
	}
}

// --topic-management verify never creates a topic: a tenant whose topics
// are missing is refused, naming them, and nothing appears on the cluster.
func TestTopicManagementVerifyCreatesNothing(t *testing.T) {
	b := StartBroker(t)
	adm := b.Admin(t)
	n := topicTemplate(t, adm)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := startGateway(t, "--kafka-brokers", strings.Join(b.Seeds, ","), "--topic-template", n.Template,
		"--topic-management", "verify", "--topic-replication-factor", "1")
	r, err := g.post(ctx, "/aep/events", "application/x-ndjson", nil, topicCheckEvent)
	if err != nil || r.status == http.StatusAccepted || !strings.Contains(string(r.body), "missing") {
		t.Fatalf("publish with verify and no topics: %v %d %s", err, r.status, r.body)
	}
	if code, body := readyz(t, g); code != http.StatusServiceUnavailable || !strings.Contains(body, "does not create topics") {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has(n.Events("default")) {
		t.Fatal("verify created the events topic")
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
