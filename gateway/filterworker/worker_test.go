package filterworker

import (
	"testing"

	"github.com/aep-gateway/aep-gateway/partitioning"
)

func TestTopicRegexpMatchesOnlyEventsTopics(t *testing.T) {
	for _, c := range []struct {
		template, topic, tenant string
	}{
		{"", "aep.acme.events", "acme"},
		{"", "aep.acme.events.deadletter", ""},
		{"", "aep.acme.events.index", ""},
		{"", "aepXacme.events", ""},
		{"prod-{tenant}", "prod-a_b-1", "a_b-1"},
		{"prod-{tenant}", "prod-a.b", ""},
	} {
		w := &Worker{re: TopicRegexp(partitioning.Naming{Template: c.template})}
		if got := w.tenantOf(c.topic); got != c.tenant {
			t.Errorf("template %q, topic %q: tenant %q, want %q", c.template, c.topic, got, c.tenant)
		}
	}
}
