package bridge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/filtering"
)

// Bridge names: the label of their metrics and the keys of a rules file.
const (
	NameCloudEvents = "cloudevents"
	NameOCSF        = "ocsf"
	NameOTLP        = "otlp"
)

// Rules say, per tenant and bridge, which events a bridge projects and at
// what capture ceiling (docs/analytics.md "Per-tenant rules"). The zero
// value bridges every event at the bridge's own ceiling.
type Rules struct {
	tenants map[string]map[string]Rule // tenant ("*": any other) -> bridge -> rule
}

// Rule is one tenant's rule for one bridge.
type Rule struct {
	// Off leaves the tenant out of the bridge.
	Off bool
	// Filter selects the events bridged (a dialect R attr-match filter,
	// AEP-0003 §6, as subscribers send); nil: every event.
	Filter *filtering.Filter
	// MaxCapture lowers the bridge's ceiling for this tenant; zero: the
	// bridge's own. A rule cannot raise it.
	MaxCapture aep.Capture
}

// ruleFile is the JSON form of Rules.
type ruleFile struct {
	Tenants map[string]map[string]struct {
		Off        bool            `json:"off"`
		Filter     json.RawMessage `json:"filter"`
		MaxCapture string          `json:"max_capture"`
	} `json:"tenants"`
}

// MaxRulesFileBytes bounds a rules file.
const MaxRulesFileBytes = 1 << 20

// LoadRules reads a rules file; "" is the zero Rules.
func LoadRules(path string) (Rules, error) {
	if path == "" {
		return Rules{}, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Rules{}, fmt.Errorf("bridge rules: %w", err)
	}
	r, err := ParseRules(b)
	if err != nil {
		return Rules{}, fmt.Errorf("bridge rules %s: %w", path, err)
	}
	return r, nil
}

// ParseRules compiles the JSON form:
//
//	{"tenants": {"acme": {"cloudevents": {"filter": {"type": ["tool.*"]}, "max_capture": "redacted"},
//	                      "otlp": {"off": true}},
//	             "*":    {"ocsf": {"filter": {"severity": ["error", "critical"]}}}}}
//
// A tenant's own entry replaces "*" for the bridges it names. Unknown
// members, bridge names and capture levels are errors.
func ParseRules(b []byte) (Rules, error) {
	if len(b) > MaxRulesFileBytes {
		return Rules{}, fmt.Errorf("%d bytes, over the %d-byte bound", len(b), MaxRulesFileBytes)
	}
	var f ruleFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Rules{}, fmt.Errorf("not a rules document: %w", err)
	}
	out := Rules{tenants: map[string]map[string]Rule{}}
	for tenant, bridges := range f.Tenants {
		out.tenants[tenant] = map[string]Rule{}
		for name, rf := range bridges {
			if name != NameCloudEvents && name != NameOCSF && name != NameOTLP {
				return Rules{}, fmt.Errorf("tenant %q: bridge %q: want cloudevents, ocsf or otlp", tenant, name)
			}
			r := Rule{Off: rf.Off}
			if len(rf.Filter) > 0 {
				flt, err := filtering.ParseR(rf.Filter)
				if err != nil {
					return Rules{}, fmt.Errorf("tenant %q: bridge %q: filter: %w", tenant, name, err)
				}
				r.Filter = flt
			}
			if rf.MaxCapture != "" {
				c, ok := aep.ParseCapture(rf.MaxCapture)
				if !ok {
					return Rules{}, fmt.Errorf("tenant %q: bridge %q: max_capture %q: want none, metadata, redacted or full", tenant, name, rf.MaxCapture)
				}
				r.MaxCapture = c
			}
			out.tenants[tenant][name] = r
		}
	}
	return out, nil
}

// For is the rule of tenant for bridge.
func (r Rules) For(bridge, tenant string) Rule {
	if rule, ok := r.tenants[tenant][bridge]; ok {
		return rule
	}
	return r.tenants["*"][bridge]
}

// decide is what a bridge does with a record of tenant whose routing
// attributes are a: the capture ceiling to project at, or an outcome
// that leaves it out.
func (r Rules) decide(bridge, tenant string, a *aep.Attrs, ceiling aep.Capture) (aep.Capture, string) {
	if a.Dialect != aep.DialectR {
		return 0, outcomeDialectD
	}
	rule := r.For(bridge, tenant)
	if rule.Off || (rule.Filter != nil && !rule.Filter.Match(a)) {
		return 0, outcomeFiltered
	}
	if rule.MaxCapture != 0 && rule.MaxCapture < ceiling {
		ceiling = rule.MaxCapture
	}
	return ceiling, ""
}
