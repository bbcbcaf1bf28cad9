package partitioning

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TopicConfig is how tenant topics are created. Zero fields take the
// documented defaults.
type TopicConfig struct {
	// Partitions of the events topic. Zero means 12.
	Partitions int32
	// ReplicationFactor of every tenant topic. Zero means 3 on a real
	// cluster; -1 means the broker's default.replication.factor.
	ReplicationFactor int16
	// Retention of the events topic: the tenant's replay window.
	// Zero means 7 days; -1 means keep forever.
	Retention time.Duration
	// RetentionBytes per partition of the events topic. Zero means unbounded.
	RetentionBytes int64
	// DeadLetterRetention of the dead-letter topic. Zero means 30 days.
	DeadLetterRetention time.Duration
	// DeadLetterRetentionBytes per partition of the dead-letter topic.
	// Zero means unbounded.
	DeadLetterRetentionBytes int64
	// Management is what Ensure does with the topics. Zero means
	// ManageCreate.
	Management TopicManagement
	// Report, when set, is called with the mismatches of a tenant's
	// topics each time they are checked (none: an empty slice), for the
	// log. It must not block.
	Report func(tenant string, mismatches []Mismatch)
	// Recheck is how long a tenant whose topics failed their check is
	// refused before they are checked again. Zero means 10 seconds.
	Recheck time.Duration
	// Revalidate is how often the topics of a tenant that passed are
	// checked again (on its next use after that, without holding up
	// its other callers), so that an operator's later change shows.
	// Zero means 5 minutes; negative means never.
	Revalidate time.Duration
}

func (c TopicConfig) withDefaults() TopicConfig {
	if c.Partitions == 0 {
		c.Partitions = 12
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = 3
	}
	if c.Retention == 0 {
		c.Retention = 7 * 24 * time.Hour
	}
	if c.DeadLetterRetention == 0 {
		c.DeadLetterRetention = 30 * 24 * time.Hour
	}
	if c.Management == "" {
		c.Management = ManageCreate
	}
	if c.Recheck == 0 {
		c.Recheck = 10 * time.Second
	}
	if c.Revalidate == 0 {
		c.Revalidate = 5 * time.Minute
	}
	return c
}

// Validate rejects contradictory settings.
func (c TopicConfig) Validate() error {
	c = c.withDefaults()
	if c.Partitions < 1 {
		return fmt.Errorf("partitions must be at least 1, got %d", c.Partitions)
	}
	if c.ReplicationFactor < 1 && c.ReplicationFactor != -1 {
		return fmt.Errorf("replication factor must be at least 1 (or -1 for the broker default), got %d", c.ReplicationFactor)
	}
	if c.Retention < 0 && c.Retention != -1 {
		return fmt.Errorf("retention must be positive or -1, got %v", c.Retention)
	}
	if c.RetentionBytes < 0 || c.DeadLetterRetentionBytes < 0 {
		return fmt.Errorf("retention bytes must be positive or 0 (unbounded), got %d and %d", c.RetentionBytes, c.DeadLetterRetentionBytes)
	}
	if _, err := ParseTopicManagement(string(c.Management)); err != nil {
		return err
	}
	return nil
}

func retentionMs(d time.Duration) string {
	if d < 0 {
		return "-1"
	}
	return strconv.FormatInt(d.Milliseconds(), 10)
}

// TopicInfo describes a provisioned events topic.
type TopicInfo struct {
	Name       string
	ID         [16]byte // Kafka topic ID: changes when the topic is recreated
	Partitions int32
}

// Provisioner creates a tenant's topics on first use (as
// TopicConfig.Management says), checks the ones it finds against what the
// gateway needs, and remembers both. Every retention-carrying topic gets
// explicit retention.* and cleanup.policy configs (brokers such as kfake
// only run their cleaner for topics that carry their own).
type Provisioner struct {
	adm    *kadm.Client
	naming Naming
	cfg    TopicConfig

	mu         sync.Mutex
	tenants    map[string]*provision // guarded by mu
	lastErr    error                 // the last failed creation, until one succeeds; guarded by mu
	mismatches map[string][]Mismatch // tenant -> its topics' last check; guarded by mu
}

// LastError is the last failure to create a tenant's topics (naming its
// cause), nil once a creation succeeded since, or else a tenant's topics
// that failed their check: /readyz reports it.
func (p *Provisioner) LastError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lastErr != nil {
		return p.lastErr
	}
	var all []Mismatch
	for _, ms := range p.mismatches {
		all = append(all, ms...)
	}
	sortMismatches(all)
	return fatalError(all)
}

// Mismatches lists every known tenant's topic mismatches, fatal or not,
// as last checked, sorted by topic and setting.
func (p *Provisioner) Mismatches() []Mismatch {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Mismatch
	for _, ms := range p.mismatches {
		out = append(out, ms...)
	}
	sortMismatches(out)
	return out
}

func sortMismatches(ms []Mismatch) {
	slices.SortFunc(ms, func(a, b Mismatch) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Setting, b.Setting))
	})
}

type provision struct {
	done    chan struct{}
	info    TopicInfo
	err     error
	retryAt time.Time // for a failed check: when to check again

	// For a success, guarded by Provisioner.mu: when to check the topics
	// again, and whether a caller is doing so now.
	revalidateAt time.Time
	checking     bool
}

// NewProvisioner returns a provisioner that creates topics through adm.
func NewProvisioner(adm *kadm.Client, naming Naming, cfg TopicConfig) (*Provisioner, error) {
	if err := naming.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Provisioner{adm: adm, naming: naming, cfg: cfg.withDefaults(), tenants: make(map[string]*provision),
		mismatches: make(map[string][]Mismatch)}, nil
}

// Naming returns the naming the provisioner creates topics with.
func (p *Provisioner) Naming() Naming { return p.naming }

// Ensure makes sure the tenant's topics exist (as TopicConfig.Management
// says), checks them, and returns its events topic. Concurrent callers
// for one tenant share one attempt; a failed attempt is forgotten so the
// next call tries again, except a failed check, which is kept for
// TopicConfig.Recheck so that every request does not describe the topics.
func (p *Provisioner) Ensure(ctx context.Context, tenant string) (TopicInfo, error) {
	if err := ValidateTenant(tenant); err != nil {
		return TopicInfo{}, err
	}
	p.mu.Lock()
	pr, ok := p.tenants[tenant]
	if ok {
		select {
		case <-pr.done:
			ok = pr.err == nil || time.Now().Before(pr.retryAt)
			if pr.err == nil && !pr.checking && !pr.revalidateAt.IsZero() && time.Now().After(pr.revalidateAt) {
				pr.checking = true
				p.mu.Unlock()
				return p.revalidate(ctx, tenant, pr)
			}
		default:
		}
	}
	if !ok {
		pr = &provision{done: make(chan struct{})}
		p.tenants[tenant] = pr
		p.mu.Unlock()
		info, ms, checked, err := p.provision(ctx, tenant)
		p.mu.Lock()
		pr.info, pr.err = info, err
		if checked {
			p.setMismatchesLocked(tenant, ms)
		}
		switch {
		case err == nil:
			p.lastErr = nil
			if checked && p.cfg.Revalidate > 0 {
				pr.revalidateAt = time.Now().Add(p.cfg.Revalidate)
			}
		case errors.Is(err, ErrTopicMismatch):
			pr.retryAt = time.Now().Add(p.cfg.Recheck)
		default:
			delete(p.tenants, tenant)
			if ctx.Err() == nil {
				p.lastErr = err
			}
		}
		p.mu.Unlock()
		close(pr.done)
		if checked && p.cfg.Report != nil {
			p.cfg.Report(tenant, ms)
		}
		return pr.info, pr.err
	}
	p.mu.Unlock()
	select {
	case <-pr.done:
		return pr.info, pr.err
	case <-ctx.Done():
		return TopicInfo{}, ctx.Err()
	}
}

// revalidate checks again the topics of a tenant that passed (pr, with
// pr.checking set by the caller). A check that finds a fatal mismatch
// replaces pr with a failed attempt, kept for Recheck; a check that
// cannot describe the topics keeps pr as it was.
func (p *Provisioner) revalidate(ctx context.Context, tenant string, pr *provision) (TopicInfo, error) {
	ms, err := p.checkTopics(ctx, tenant, p.specs(tenant))
	p.mu.Lock()
	pr.checking = false
	pr.revalidateAt = time.Now().Add(p.cfg.Revalidate)
	if err != nil {
		p.mu.Unlock()
		return pr.info, nil //nolint:nilerr // documented: a check that cannot describe the topics keeps pr
	}
	p.setMismatchesLocked(tenant, ms)
	ferr := fatalError(ms)
	if ferr != nil && p.tenants[tenant] == pr {
		failed := &provision{done: make(chan struct{}), err: ferr, retryAt: time.Now().Add(p.cfg.Recheck)}
		close(failed.done)
		p.tenants[tenant] = failed
	}
	p.mu.Unlock()
	if p.cfg.Report != nil {
		p.cfg.Report(tenant, ms)
	}
	if ferr != nil {
		return TopicInfo{}, ferr
	}
	return pr.info, nil
}

// setMismatchesLocked records a tenant's last check. Must hold p.mu.
func (p *Provisioner) setMismatchesLocked(tenant string, ms []Mismatch) {
	if len(ms) == 0 {
		delete(p.mismatches, tenant)
	} else {
		p.mismatches[tenant] = ms
	}
}

// fatalError is the error of the fatal mismatches among ms, nil if none.
func fatalError(ms []Mismatch) error {
	var fatal []Mismatch
	for _, m := range ms {
		if m.Fatal {
			fatal = append(fatal, m)
		}
	}
	if len(fatal) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrTopicMismatch, &TopicMismatchError{Mismatches: fatal})
}

func (p *Provisioner) specs(tenant string) []topicSpec {
	c := p.cfg
	str := func(s string) *string { return &s }
	bytes := func(n int64) *string {
		if n > 0 {
			return str(strconv.FormatInt(n, 10))
		}
		return str("-1")
	}
	events := map[string]*string{
		"cleanup.policy":  str("delete"),
		"retention.ms":    str(retentionMs(c.Retention)),
		"retention.bytes": bytes(c.RetentionBytes),
	}
	dead := map[string]*string{"cleanup.policy": str("delete"), "retention.ms": str(retentionMs(c.DeadLetterRetention))}
	if c.DeadLetterRetentionBytes > 0 {
		dead["retention.bytes"] = bytes(c.DeadLetterRetentionBytes)
	}
	return []topicSpec{
		{p.naming.Events(tenant), KindEvents, c.Partitions, events},
		{p.naming.DeadLetter(tenant), KindDeadLetter, c.Partitions, dead},
		{p.naming.Index(tenant), KindIndex, c.Partitions, map[string]*string{"cleanup.policy": str("compact")}},
		{p.naming.Subscriptions(tenant), KindSubscriptions, 1, map[string]*string{"cleanup.policy": str("compact")}},
	}
}

// provision creates (ManageCreate) and checks (ManageCreate, ManageVerify)
// the tenant's topics; checked says whether ms is the outcome of a check.
func (p *Provisioner) provision(ctx context.Context, tenant string) (info TopicInfo, ms []Mismatch, checked bool, err error) {
	specs := p.specs(tenant)
	switch p.cfg.Management {
	case ManageNone:
		info, err = p.describe(ctx, specs[0].name)
		return info, nil, false, err
	case ManageCreate:
		if err := p.create(ctx, specs); err != nil {
			return TopicInfo{}, nil, false, err
		}
		// A topic just created may take a moment to show in metadata.
		for _, s := range specs {
			if _, err := p.describe(ctx, s.name); err != nil {
				return TopicInfo{}, nil, false, err
			}
		}
	}
	ms, err = p.checkTopics(ctx, tenant, specs)
	if err != nil {
		return TopicInfo{}, nil, false, err
	}
	if err := fatalError(ms); err != nil {
		return TopicInfo{}, ms, true, err
	}
	info, err = p.describe(ctx, specs[0].name)
	return info, ms, true, err
}

func (p *Provisioner) create(ctx context.Context, specs []topicSpec) error {
	rf := p.cfg.ReplicationFactor
	for _, s := range specs {
		resp, err := p.adm.CreateTopic(ctx, s.parts, rf, s.cfg, s.name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", s.name, ExplainCreate(err, rf, resp.ErrMessage))
		}
	}
	return nil
}

func (p *Provisioner) describe(ctx context.Context, topic string) (TopicInfo, error) {
	// A freshly created topic may take a moment to show in metadata on a
	// real cluster; retry briefly.
	for attempt := 0; ; attempt++ {
		md, err := p.adm.Metadata(ctx, topic)
		if err != nil {
			return TopicInfo{}, fmt.Errorf("describe topic %s: %w", topic, err)
		}
		td, ok := md.Topics[topic]
		if ok && td.Err == nil && len(td.Partitions) > 0 {
			return TopicInfo{Name: topic, ID: td.ID, Partitions: int32(len(td.Partitions))}, nil
		}
		if attempt >= 50 {
			if ok && td.Err != nil {
				return TopicInfo{}, fmt.Errorf("describe topic %s: %w", topic, td.Err)
			}
			return TopicInfo{}, fmt.Errorf("describe topic %s: not visible in metadata", topic)
		}
		select {
		case <-ctx.Done():
			return TopicInfo{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ExplainCreate wraps a failed topic creation with its cause in words and
// the fix, for the answer to the request, /readyz and the log: the usual
// one on a small cluster is a replication factor above the broker count.
// detail is the broker's error message, when it sent one.
func ExplainCreate(err error, rf int16, detail ...string) error {
	msg := strings.TrimSpace(strings.Join(detail, " "))
	if msg != "" {
		msg = " (" + msg + ")"
	}
	switch {
	case errors.Is(err, kerr.InvalidReplicationFactor):
		return fmt.Errorf("replication factor %s larger than the available brokers%s: set --topic-replication-factor (-1: the broker default): %w", rfText(rf), msg, err)
	case errors.Is(err, kerr.PolicyViolation), errors.Is(err, kerr.InvalidConfig):
		return fmt.Errorf("the cluster refused the topic settings%s: %w", msg, err)
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		return fmt.Errorf("not authorized to create topics%s: grant CREATE or create them ahead: %w", msg, err)
	}
	return err
}

func rfText(rf int16) string {
	if rf == -1 {
		return "(broker default)"
	}
	return strconv.Itoa(int(rf))
}

// IsProvisioningError says whether err is a topic creation the cluster
// refused for a reason an operator must fix (ExplainCreate words it): the
// answer to a client may then name it. A tenant's topics that failed
// their check (ErrTopicMismatch) are one too.
func IsProvisioningError(err error) bool {
	if errors.Is(err, ErrTopicMismatch) {
		return true
	}
	for _, k := range []error{kerr.InvalidReplicationFactor, kerr.PolicyViolation, kerr.InvalidConfig, kerr.TopicAuthorizationFailed, kerr.ClusterAuthorizationFailed} {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}
