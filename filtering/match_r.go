package filtering

import (
	"github.com/aep-gateway/aep-gateway/aep"
)

// severityLevels is the AEP-0001 §8.1 total order (schemas/registry/severity.json).
var severityLevels = [...]string{"debug", "info", "notice", "warning", "error", "critical"}

// captureLevels is the AEP-0001 §8.2 order (schemas/registry/capture.json).
var captureLevels = [...]string{"none", "metadata", "redacted", "full"}

const (
	defaultSeverity = 1 // info
	defaultCapture  = 1 // metadata
)

// severityRank is the rank of an event's severity, applying the "info"
// default when absent; -1 for a value outside the registry.
func severityRank(s string) int {
	if s == "" {
		return defaultSeverity
	}
	return levelIndex(severityLevels[:], s)
}

// captureRank is the rank of an event's capture, applying the "metadata"
// default when absent; -1 for a value outside the registry.
func captureRank(s string) int {
	if s == "" {
		return defaultCapture
	}
	return levelIndex(captureLevels[:], s)
}

func levelIndex(levels []string, s string) int {
	for i, l := range levels {
		if l == s {
			return i
		}
	}
	return -1
}

// matchR evaluates the dialect R-only predicates; the string fields and the
// type have already matched.
func (f *Filter) matchR(a *aep.Attrs) bool {
	if f.hasEp {
		var e int64 // AEP-0001 §5.1: epoch defaults to 0
		if a.HasEpoch {
			e = a.Epoch
		}
		ok := false
		for _, x := range f.epochs {
			if x == e {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if f.sevMask != 0 {
		r := severityRank(a.Severity)
		if r < 0 || f.sevMask&(1<<r) == 0 {
			return false
		}
	}
	if f.capMask != 0 {
		r := captureRank(a.Capture)
		if r < 0 || f.capMask&(1<<r) == 0 {
			return false
		}
	}
	for i := range f.ext {
		if !f.ext[i].match(a.Ext) {
			return false
		}
	}
	return true
}

// extPred constrains one extension attribute to any of a set of JSON
// scalars.
type extPred struct {
	name string
	vals []scalar
}

// match finds the first extension attribute named p.name and compares its
// raw JSON value with each wanted scalar. An absent attribute never matches.
func (p *extPred) match(exts []aep.Ext) bool {
	for i := range exts {
		if exts[i].Name != p.name {
			continue
		}
		raw := exts[i].Value
		for j := range p.vals {
			if p.vals[j].equalRaw(raw) {
				return true
			}
		}
		return false
	}
	return false
}
