package partitioning

import (
	"errors"
	"fmt"
	"strings"
)

// DefaultTopicTemplate is the events topic of a tenant unless configured
// otherwise. "{tenant}" is replaced by the tenant name.
const DefaultTopicTemplate = "aep.{tenant}.events"

// ErrInvalidTenant is returned for a tenant name that cannot name a topic.
var ErrInvalidTenant = errors.New("invalid tenant name")

// MaxTenantLen bounds tenant names so every derived topic name stays under
// Kafka's 249-character limit.
const MaxTenantLen = 64

// ValidateTenant reports whether a tenant name is usable: 1..64 characters of
// [a-zA-Z0-9_-]. Dots are excluded so that a tenant can never make its topic
// name collide with another tenant's derived topics.
func ValidateTenant(tenant string) error {
	if tenant == "" || len(tenant) > MaxTenantLen {
		return fmt.Errorf("%w: %q must have 1 to %d characters", ErrInvalidTenant, tenant, MaxTenantLen)
	}
	for i := 0; i < len(tenant); i++ {
		c := tenant[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("%w: %q may only contain letters, digits, '_' and '-'", ErrInvalidTenant, tenant)
		}
	}
	return nil
}

// Naming derives every Kafka topic name of a tenant from one template.
// The zero value uses DefaultTopicTemplate.
type Naming struct {
	// Template names the events topic; it must contain "{tenant}" and only
	// characters legal in a Kafka topic name. Zero means DefaultTopicTemplate.
	Template string
}

// Validate rejects a template that cannot name topics.
func (n Naming) Validate() error {
	t := n.template()
	if strings.Count(t, "{tenant}") != 1 {
		return fmt.Errorf("topic template %q must contain {tenant} exactly once", t)
	}
	probe := strings.Replace(t, "{tenant}", "x", 1)
	for i := 0; i < len(probe); i++ {
		c := probe[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
		if !ok {
			return fmt.Errorf("topic template %q has a character Kafka does not allow in topic names: %q", t, c)
		}
	}
	if len(probe)-1+MaxTenantLen+len(".deadletter") > 249 {
		return fmt.Errorf("topic template %q is too long", t)
	}
	return nil
}

func (n Naming) template() string {
	if n.Template == "" {
		return DefaultTopicTemplate
	}
	return n.Template
}

// Events is the tenant's event log: every accepted event, keyed by session.
func (n Naming) Events(tenant string) string {
	return strings.Replace(n.template(), "{tenant}", tenant, 1)
}

// DeadLetter is the tenant's dead-letter topic (events that exhausted their
// delivery attempts or were rejected by a consumer).
func (n Naming) DeadLetter(tenant string) string { return n.Events(tenant) + ".deadletter" }

// Index is the tenant's compacted session-position index (see package cursor).
func (n Naming) Index(tenant string) string { return n.Events(tenant) + ".index" }

// Subscriptions is the tenant's compacted topic of durable subscription
// definitions.
func (n Naming) Subscriptions(tenant string) string { return n.Events(tenant) + ".subscriptions" }

// Audit is the tenant's audit topic: the signed checkpoints of its events
// topic, partition for partition (docs/audit.md).
func (n Naming) Audit(tenant string) string { return n.Events(tenant) + ".audit" }

// CloudEvents is the tenant's CloudEvents topic: its dialect R events in the
// CloudEvents Kafka protocol binding, partition for partition (the bridge,
// docs/analytics.md).
func (n Naming) CloudEvents(tenant string) string { return n.Events(tenant) + ".cloudevents" }

// OCSF is the tenant's OCSF topic: the security-relevant families of its
// dialect R events as OCSF records, partition for partition (the bridge,
// docs/analytics.md).
func (n Naming) OCSF(tenant string) string { return n.Events(tenant) + ".ocsf" }
