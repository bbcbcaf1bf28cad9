package filtering

import (
	"github.com/aep-gateway/aep-gateway/aep"
)

// field names one string-valued routing attribute a filter can constrain
// with exact values.
type field uint8

const (
	fSession      field = iota // R session, D session_id
	fTask                      // D task_id
	fConversation              // D conversation_id
	fID                        // R id
	fCause                     // R cause
	fSubject                   // R subject
	fRun                       // R run
	fStep                      // R step
	fTarget                    // D target
	fTopic                     // D topic
	fAgent                     // R agent
	fSource                    // both
	numFields
)

// get returns the attribute's value; "" means the event does not carry it.
func (f field) get(a *aep.Attrs) string {
	switch f {
	case fSession:
		return a.Session
	case fTask:
		return a.Task
	case fConversation:
		return a.Conversation
	case fID:
		return a.ID
	case fCause:
		return a.Cause
	case fSubject:
		return a.Subject
	case fRun:
		return a.Run
	case fStep:
		return a.Step
	case fTarget:
		return a.Target
	case fTopic:
		return a.Topic
	case fAgent:
		return a.Agent
	case fSource:
		return a.Source
	}
	return ""
}

// strSet is an any-of set of exact string values. Small sets are scanned,
// large ones hashed; both never allocate on lookup.
type strSet struct {
	vals []string
	m    map[string]struct{}
}

const strSetHashAt = 12

func newStrSet(vals []string) strSet {
	s := strSet{vals: vals}
	if len(vals) >= strSetHashAt {
		s.m = make(map[string]struct{}, len(vals))
		for _, v := range vals {
			s.m[v] = struct{}{}
		}
	}
	return s
}

func (s *strSet) has(v string) bool {
	if s.m != nil {
		_, ok := s.m[v]
		return ok
	}
	for _, x := range s.vals {
		if x == v {
			return true
		}
	}
	return false
}

// strPred constrains one field to a set of values.
type strPred struct {
	f   field
	set strSet
}

// Filter is one compiled subscription filter of either dialect. It is
// immutable once returned by a parser and safe for concurrent use; Match
// never allocates.
type Filter struct {
	dialect aep.Dialect
	// never is set when a dialect R predicate can match no event at all
	// (for example an integer compared with a string attribute): the filter
	// is valid (AEP-0003 §6.1 Scalar) but inert.
	never bool

	strs []strPred // in field order, most selective first

	hasTypes bool
	typeAll  bool // D "*" among the patterns: no type constraint
	types    []typePattern

	// Dialect R only.
	epochs  []int64 // nil: no epoch constraint
	hasEp   bool
	sevMask uint8 // bit i = severity level i allowed; 0 = no constraint
	capMask uint8 // bit i = capture level i allowed; 0 = no constraint
	ext     []extPred

	// Dialect D only: carried, not matched.
	fromCursor   string
	deliveryMode string
	ignored      []string

	// src is the normalized filter object, for echoing back to clients.
	src []byte
}

// Dialect is the dialect the filter was written in; it only ever matches
// events of that dialect.
func (f *Filter) Dialect() aep.Dialect { return f.dialect }

// FromCursor is dialect D's from_cursor, or "".
func (f *Filter) FromCursor() string { return f.fromCursor }

// DeliveryMode is dialect D's delivery_mode (best_effort, at_least_once or
// replayable), or "" when the filter did not ask for one.
func (f *Filter) DeliveryMode() string { return f.deliveryMode }

// IgnoredKeys lists the members of a dialect D JSON filter that are not part
// of the filter schema and were ignored (the schema allows additional
// properties). The gateway may log or warn about them.
func (f *Filter) IgnoredKeys() []string { return f.ignored }

// MarshalJSON returns the filter as accepted, normalized: single values as
// one-element arrays, duplicates removed, members in a fixed order. Parsing
// the result yields an equivalent filter.
func (f *Filter) MarshalJSON() ([]byte, error) {
	return append([]byte(nil), f.src...), nil
}

// String is the normalized JSON form.
func (f *Filter) String() string { return string(f.src) }

// TypePatterns are the filter's type patterns as written; nil when it does
// not constrain types (no types member, or "*" among them), which asks
// for every type.
func (f *Filter) TypePatterns() []string {
	if !f.hasTypes || f.typeAll {
		return nil
	}
	out := make([]string, len(f.types))
	for i := range f.types {
		out[i] = f.types[i].raw
	}
	return out
}

// Sources are the exact source values the filter accepts; nil when it
// does not constrain the source.
func (f *Filter) Sources() []string {
	for i := range f.strs {
		if f.strs[i].f == fSource {
			return f.strs[i].set.vals
		}
	}
	return nil
}

// Match reports whether the event with routing attributes a is selected by
// the filter. An event of another dialect never matches, and the zero
// Filter matches nothing. It never allocates and is safe to call
// concurrently.
func (f *Filter) Match(a *aep.Attrs) bool {
	if a.Dialect != f.dialect || f.never || f.dialect == aep.DialectUnknown {
		return false
	}
	for i := range f.strs {
		p := &f.strs[i]
		v := p.f.get(a)
		if v == "" || !p.set.has(v) {
			return false
		}
	}
	if f.hasTypes && !f.typeAll && !f.matchType(a.Type) {
		return false
	}
	if f.dialect == aep.DialectR {
		return f.matchR(a)
	}
	return true
}

func (f *Filter) matchType(t string) bool {
	for i := range f.types {
		if f.types[i].match(t) {
			return true
		}
	}
	return false
}

// firstTypeMatch is the index of the first pattern matching t, or -1.
func (f *Filter) firstTypeMatch(t string) int {
	for i := range f.types {
		if f.types[i].match(t) {
			return i
		}
	}
	return -1
}
