package partitioning

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TopicManagement is what the gateway does with tenant topics
// (--topic-management).
type TopicManagement string

const (
	// ManageCreate creates missing topics and checks the ones it finds.
	ManageCreate TopicManagement = "create"
	// ManageVerify never creates topics: it describes and checks them, and
	// a missing topic is an error (topics managed by Strimzi, Terraform).
	ManageVerify TopicManagement = "verify"
	// ManageNone trusts the topics as they are: no creation, no checks.
	ManageNone TopicManagement = "none"
)

// ParseTopicManagement reads --topic-management; "" means create.
func ParseTopicManagement(s string) (TopicManagement, error) {
	switch m := TopicManagement(strings.ToLower(strings.TrimSpace(s))); m {
	case "":
		return ManageCreate, nil
	case ManageCreate, ManageVerify, ManageNone:
		return m, nil
	}
	return "", fmt.Errorf("topic management %q: want create, verify or none", s)
}

// Topic kinds, as Mismatch.Kind names them.
const (
	KindEvents        = "events"
	KindDeadLetter    = "dead_letter"
	KindIndex         = "index"
	KindSubscriptions = "subscriptions"
)

// Mismatch is one way a tenant topic differs from what the gateway needs
// (docs/operations-kafka.md has the table). A fatal one makes the tenant's
// topics unusable (Ensure fails) and the node not ready; the others are
// warnings: logged, counted and shown on /readyz.
type Mismatch struct {
	Tenant  string
	Topic   string
	Kind    string // KindEvents, ...
	Setting string // cleanup.policy, partitions, retention.ms, ...
	Want    string
	Got     string
	Fatal   bool
	Why     string // what goes wrong because of it
}

func (m Mismatch) String() string {
	return fmt.Sprintf("topic %s: %s is %s, the gateway needs %s: %s", m.Topic, m.Setting, m.Got, m.Want, m.Why)
}

// ErrTopicMismatch is wrapped by the error Ensure returns when a tenant's
// topics exist but cannot be used as they are (a fatal Mismatch, or a
// missing topic under --topic-management verify).
var ErrTopicMismatch = errors.New("tenant topics do not match what the gateway needs")

// TopicMismatchError lists the fatal mismatches of a tenant's topics.
type TopicMismatchError struct{ Mismatches []Mismatch }

func (e *TopicMismatchError) Error() string {
	parts := make([]string, len(e.Mismatches))
	for i, m := range e.Mismatches {
		parts[i] = m.String()
	}
	return strings.Join(parts, "; ")
}

func (e *TopicMismatchError) Unwrap() error { return ErrTopicMismatch }

type topicSpec struct {
	name  string
	kind  string
	parts int32
	cfg   map[string]*string
}

// checkTopics describes specs and compares them with what the gateway
// needs. A topic that is missing is a fatal mismatch; an error reading
// the configs (no DESCRIBE_CONFIGS) is a warning, since nothing could be
// checked, and an error reading metadata is returned.
func (p *Provisioner) checkTopics(ctx context.Context, tenant string, specs []topicSpec) ([]Mismatch, error) {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.name
	}
	md, err := p.adm.Metadata(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("describe topics: %w", err)
	}
	rcs, cfgErr := p.adm.DescribeTopicConfigs(ctx, names...)
	var out []Mismatch
	add := func(s topicSpec, setting, want, got string, fatal bool, why string) {
		out = append(out, Mismatch{Tenant: tenant, Topic: s.name, Kind: s.kind, Setting: setting, Want: want, Got: got, Fatal: fatal, Why: why})
	}
	for _, s := range specs {
		td, ok := md.Topics[s.name]
		if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
			add(s, "exists", "the topic", "missing", true, "--topic-management "+string(p.cfg.Management)+" does not create topics: create it ahead (docs/operations-kafka.md)")
			continue
		}
		if td.Err != nil {
			return nil, fmt.Errorf("describe topic %s: %w", s.name, td.Err)
		}
		replicas := 0
		for _, pd := range td.Partitions {
			replicas = max(replicas, len(pd.Replicas))
		}
		p.checkPartitions(s, int32(len(td.Partitions)), add)
		if cfgErr != nil {
			add(s, "configs", "readable", "unreadable ("+cfgErr.Error()+")", false, "grant DESCRIBE_CONFIGS to check cleanup policy, retention and min.insync.replicas")
			continue
		}
		rc, err := rcs.On(s.name, nil)
		if err == nil {
			err = rc.Err
		}
		if err != nil {
			add(s, "configs", "readable", "unreadable ("+err.Error()+")", false, "grant DESCRIBE_CONFIGS to check cleanup policy, retention and min.insync.replicas")
			continue
		}
		got := map[string]string{}
		for _, c := range rc.Configs {
			if c.Value != nil {
				got[c.Key] = *c.Value
			}
		}
		p.checkConfigs(s, got, replicas, add)
	}
	return out, nil
}

type addFn func(s topicSpec, setting, want, got string, fatal bool, why string)

func (p *Provisioner) checkPartitions(s topicSpec, n int32, add addFn) {
	switch s.kind {
	case KindEvents:
		if n != s.parts {
			add(s, "partitions", strconv.Itoa(int(s.parts)), strconv.Itoa(int(n)), false,
				"--topic-partitions differs from the topic; the gateway uses the topic's count (fewer partitions: less parallelism)")
		}
	case KindSubscriptions:
		if n != 1 {
			add(s, "partitions", "1", strconv.Itoa(int(n)), false, "the subscription journal is read as one partition's order")
		}
	}
}

func (p *Provisioner) checkConfigs(s topicSpec, got map[string]string, replicas int, add addFn) {
	policy := got["cleanup.policy"]
	compacts := strings.Contains(policy, "compact")
	deletes := strings.Contains(policy, "delete")
	switch s.kind {
	case KindEvents:
		if compacts {
			add(s, "cleanup.policy", "delete", policy, true,
				"compaction keeps only the newest event of each session key: events are lost, and cursors and replays point at offsets that vanish")
		}
		p.checkRetention(s, got, add)
	case KindDeadLetter:
		if compacts {
			add(s, "cleanup.policy", "delete", policy, true, "compaction keeps only the newest dead letter of each session key")
		}
	case KindIndex:
		if !compacts || deletes {
			add(s, "cleanup.policy", "compact", policy, false,
				"the cursor index expires with retention: resuming an old dialect R position falls back to scanning or replay-exhausted")
		}
	case KindSubscriptions:
		if !compacts || deletes {
			add(s, "cleanup.policy", "compact", policy, true,
				"retention deletes durable subscription definitions: subscriptions vanish after a restart")
		}
	}
	if v, ok := got["min.insync.replicas"]; ok && replicas > 0 {
		isr, err := strconv.Atoi(v)
		switch {
		case err != nil:
		case isr > replicas:
			add(s, "min.insync.replicas", "<= "+strconv.Itoa(replicas)+" (the replicas)", v, true,
				"every write with acks=all fails with NOT_ENOUGH_REPLICAS")
		case isr < 2 && replicas > 1 && s.kind == KindEvents:
			add(s, "min.insync.replicas", ">= 2", v, false,
				"an acknowledged event rests on one broker: losing it before replication loses the event")
		}
	}
}

func (p *Provisioner) checkRetention(s topicSpec, got map[string]string, add addFn) {
	c := p.cfg
	if v, ok := got["retention.ms"]; ok {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err == nil && c.Retention >= 0 && (ms >= 0 && ms < c.Retention.Milliseconds()) {
			add(s, "retention.ms", retentionMs(c.Retention)+" ("+c.Retention.String()+")", v+" ("+(time.Duration(ms)*time.Millisecond).String()+")", false,
				"the replay window is shorter than --topic-retention: cursors and durable subscriptions older than it resume at the earliest kept event")
		}
	}
	if v, ok := got["retention.bytes"]; ok {
		b, err := strconv.ParseInt(v, 10, 64)
		want := c.RetentionBytes
		w := "-1 (unbounded)"
		if want > 0 {
			w = strconv.FormatInt(want, 10)
		}
		switch {
		case err != nil:
		case b >= 0 && (want <= 0 || b < want):
			add(s, "retention.bytes", w, v, false,
				"the topic keeps fewer bytes per partition than --topic-retention-bytes: the replay window is shorter under load")
		case b < 0 && want > 0:
			add(s, "retention.bytes", w, v+" (unbounded)", false,
				"the topic keeps every byte for retention.ms: disk (and, on the embedded broker, restart memory) grows with the data")
		}
	}
}

// maxWarnings bounds Warnings' list.
const maxWarnings = 20

// Warnings words the non-fatal mismatches, at most maxWarnings of them
// and then a count of the rest, for /readyz.
func (p *Provisioner) Warnings() []string {
	var out []string
	rest := 0
	for _, m := range p.Mismatches() {
		switch {
		case m.Fatal:
		case len(out) < maxWarnings:
			out = append(out, m.String())
		default:
			rest++
		}
	}
	if rest > 0 {
		out = append(out, fmt.Sprintf("and %d more (aep_topic_config_mismatches)", rest))
	}
	return out
}
