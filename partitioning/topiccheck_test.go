package partitioning

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

func strp(s string) *string { return &s }

// precreate makes the four topics of tenant "acme" with the given events
// topic configs, the others as the gateway would make them.
func precreate(t *testing.T, adm *kadm.Client, parts int32, events map[string]*string) {
	t.Helper()
	ctx := context.Background()
	n := Naming{}
	for _, s := range []struct {
		name  string
		parts int32
		cfg   map[string]*string
	}{
		{n.Events("acme"), parts, events},
		{n.DeadLetter("acme"), parts, map[string]*string{"cleanup.policy": strp("delete")}},
		{n.Index("acme"), parts, map[string]*string{"cleanup.policy": strp("compact")}},
		{n.Subscriptions("acme"), 1, map[string]*string{"cleanup.policy": strp("compact")}},
	} {
		resp, err := adm.CreateTopic(ctx, s.parts, 1, s.cfg, s.name)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatalf("precreate %s: %v", s.name, err)
		}
	}
}

func findMismatch(ms []Mismatch, setting string) (Mismatch, bool) {
	for _, m := range ms {
		if m.Kind == KindEvents && m.Setting == setting {
			return m, true
		}
	}
	return Mismatch{}, false
}

// The operator's topic of the issue: 2 partitions, compacted, 1 h
// retention. Before the checks, Ensure used it silently.
func TestProvisionerRefusesCompactedEventsTopic(t *testing.T) {
	adm := newAdmin(t)
	precreate(t, adm, 2, map[string]*string{"cleanup.policy": strp("compact"), "retention.ms": strp("3600000")})
	var mu sync.Mutex
	var reported [][]Mismatch
	p, err := NewProvisioner(adm, Naming{}, TopicConfig{Partitions: 4, ReplicationFactor: 1, Retention: 24 * time.Hour,
		Recheck: 20 * time.Millisecond,
		Report:  func(_ string, ms []Mismatch) { mu.Lock(); reported = append(reported, ms); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	_, err = p.Ensure(ctx, "acme")
	if !errors.Is(err, ErrTopicMismatch) || !IsProvisioningError(err) {
		t.Fatalf("Ensure on a compacted events topic: %v, want ErrTopicMismatch", err)
	}
	var tme *TopicMismatchError
	if !errors.As(err, &tme) || len(tme.Mismatches) != 1 || tme.Mismatches[0].Setting != "cleanup.policy" {
		t.Fatalf("fatal mismatches = %+v", tme)
	}
	if le := p.LastError(); !errors.Is(le, ErrTopicMismatch) || !strings.Contains(le.Error(), "cleanup.policy is compact") {
		t.Fatalf("LastError = %v", le)
	}
	ms := p.Mismatches()
	if m, ok := findMismatch(ms, "partitions"); !ok || m.Fatal || m.Got != "2" || m.Want != "4" {
		t.Errorf("partitions mismatch = %+v %v", m, ok)
	}
	if m, ok := findMismatch(ms, "retention.ms"); !ok || m.Fatal || !strings.HasPrefix(m.Got, "3600000") {
		t.Errorf("retention mismatch = %+v %v", m, ok)
	}
	// Within Recheck, callers get the kept answer without a new check.
	mu.Lock()
	n := len(reported)
	mu.Unlock()
	if n != 1 {
		t.Fatalf("reported %d times, want 1", n)
	}

	// The operator fixes the policy: after Recheck the tenant is usable,
	// the warnings stay, the node is ready again.
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: strp("delete")}}, Naming{}.Events("acme")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := p.Ensure(ctx, "acme")
		if err == nil {
			if info.Partitions != 2 {
				t.Fatalf("info = %+v, want the topic's 2 partitions", info)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still refused after the fix: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if le := p.LastError(); le != nil {
		t.Fatalf("LastError after the fix = %v", le)
	}
	if _, ok := findMismatch(p.Mismatches(), "retention.ms"); !ok {
		t.Error("the retention warning vanished although the topic still has 1 h")
	}
}

func TestProvisionerChecksMinInsyncReplicas(t *testing.T) {
	adm := newAdmin(t)
	precreate(t, adm, 4, map[string]*string{"cleanup.policy": strp("delete"), "min.insync.replicas": strp("2")})
	p, _ := NewProvisioner(adm, Naming{}, TopicConfig{Partitions: 4, ReplicationFactor: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := p.Ensure(ctx, "acme")
	var tme *TopicMismatchError
	if !errors.As(err, &tme) || tme.Mismatches[0].Setting != "min.insync.replicas" {
		t.Fatalf("Ensure with min.insync.replicas 2 on 1 replica: %v", err)
	}
}

// A conforming topic made by the gateway itself has no mismatch at all.
func TestProvisionerOwnTopicsConform(t *testing.T) {
	adm := newAdmin(t)
	var reports int
	p, _ := NewProvisioner(adm, Naming{}, TopicConfig{Partitions: 3, ReplicationFactor: 1, RetentionBytes: 1 << 20,
		Report: func(_ string, ms []Mismatch) {
			reports++
			if len(ms) > 0 {
				t.Errorf("own topics mismatch: %v", ms)
			}
		}})
	if _, err := p.Ensure(context.Background(), "acme"); err != nil {
		t.Fatal(err)
	}
	if reports != 1 || len(p.Mismatches()) != 0 || p.LastError() != nil {
		t.Fatalf("reports %d, mismatches %v, last error %v", reports, p.Mismatches(), p.LastError())
	}
}

func TestProvisionerNoneTrusts(t *testing.T) {
	adm := newAdmin(t)
	precreate(t, adm, 2, map[string]*string{"cleanup.policy": strp("compact")})
	p, _ := NewProvisioner(adm, Naming{}, TopicConfig{Partitions: 4, ReplicationFactor: 1, Management: ManageNone,
		Report: func(string, []Mismatch) { t.Error("none checked the topics") }})
	info, err := p.Ensure(context.Background(), "acme")
	if err != nil || info.Partitions != 2 {
		t.Fatalf("none: %+v %v", info, err)
	}
}

// saslCluster is a kfake cluster with ACLs: admin is a superuser, app may
// only describe the aep. topics and their configs (a cluster whose topics
// are managed by Strimzi or Terraform).
func saslCluster(t *testing.T) (admin, app *kadm.Client) {
	t.Helper()
	allow := func(op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "aep.", Pattern: kmsg.ACLResourcePatternTypePrefixed, Operation: op, Allow: true}
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", "app", "app", allow(kmsg.ACLOperationDescribe), allow(kmsg.ACLOperationDescribeConfigs)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	client := func(user string) *kadm.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.SASL(plain.Auth{User: user, Pass: user}.AsMechanism()),
			kgo.MetadataMinAge(10*time.Millisecond)) // kgo caches metadata answers for 5 s by default
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return kadm.NewClient(cl)
	}
	return client("admin"), client("app")
}

func TestProvisionerVerifyWithoutCreateACL(t *testing.T) {
	admin, app := saslCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// verify on missing topics: a clear error, and nothing created.
	pv, _ := NewProvisioner(app, Naming{}, TopicConfig{Partitions: 4, ReplicationFactor: 1, Management: ManageVerify, Recheck: time.Nanosecond})
	_, err := pv.Ensure(ctx, "acme")
	if !errors.Is(err, ErrTopicMismatch) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("verify on missing topics: %v", err)
	}
	if td, _ := admin.ListTopics(ctx); td.Has(Naming{}.Events("acme")) {
		t.Fatal("verify created a topic")
	}

	// The platform team creates them; verify uses them with DESCRIBE and
	// DESCRIBE_CONFIGS only.
	precreate(t, admin, 4, map[string]*string{"cleanup.policy": strp("delete"), "retention.ms": strp("604800000")})
	var info TopicInfo
	deadline := time.Now().Add(10 * time.Second)
	for info, err = pv.Ensure(ctx, "acme"); err != nil && time.Now().Before(deadline); info, err = pv.Ensure(ctx, "acme") {
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || info.Partitions != 4 {
		t.Fatalf("verify on conforming topics: %+v %v", info, err)
	}

	// create, with the same rights, is refused although the topics exist.
	pc, _ := NewProvisioner(app, Naming{}, TopicConfig{Partitions: 4, ReplicationFactor: 1})
	if _, err := pc.Ensure(ctx, "acme"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("create without CREATE: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
}

func TestParseTopicManagement(t *testing.T) {
	for in, want := range map[string]TopicManagement{"": ManageCreate, "create": ManageCreate, "Verify": ManageVerify, "none": ManageNone} {
		if got, err := ParseTopicManagement(in); err != nil || got != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	if _, err := ParseTopicManagement("trust"); err == nil {
		t.Error("trust accepted")
	}
	if (TopicConfig{Management: "sometimes"}).Validate() == nil {
		t.Error("bad management validated")
	}
}

// An operator who compacts a topic the gateway already uses is noticed on
// a later use: the tenant is refused from then on, and served again once
// the change is undone.
func TestProvisionerRevalidatesAfterOperatorChange(t *testing.T) {
	adm := newAdmin(t)
	p, _ := NewProvisioner(adm, Naming{}, TopicConfig{Partitions: 2, ReplicationFactor: 1,
		Revalidate: 20 * time.Millisecond, Recheck: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := p.Ensure(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	set := func(policy string) {
		t.Helper()
		if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: strp(policy)}}, Naming{}.Events("acme")); err != nil {
			t.Fatal(err)
		}
	}
	until := func(what string, cond func(error) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := p.Ensure(ctx, "acme")
			if cond(err) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: last answer %v", what, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	set("compact")
	until("the compaction noticed", func(err error) bool { return errors.Is(err, ErrTopicMismatch) })
	if !errors.Is(p.LastError(), ErrTopicMismatch) {
		t.Fatalf("LastError = %v", p.LastError())
	}
	set("delete")
	until("the fix noticed", func(err error) bool { return err == nil })
	if p.LastError() != nil {
		t.Fatalf("LastError after the fix = %v", p.LastError())
	}
}
