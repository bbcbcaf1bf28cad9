package bridge

import (
	"regexp"
	"sync"
)

// tenantNames names the tenant of an events topic, remembering the answer:
// the regexp cost ~5 % of a bridge's CPU when matched per record.
type tenantNames struct {
	re *regexp.Regexp
	mu sync.Mutex
	m  map[string]string // topic -> tenant ("" when not a tenant topic)
}

// maxRememberedTopics bounds the memory; past it the map starts again.
const maxRememberedTopics = 1 << 14

func (t *tenantNames) of(topic string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if name, ok := t.m[topic]; ok {
		return name
	}
	if t.m == nil || len(t.m) >= maxRememberedTopics {
		t.m = map[string]string{}
	}
	name := ""
	if m := t.re.FindStringSubmatch(topic); m != nil {
		name = m[1]
	}
	t.m[topic] = name
	return name
}
