// Package principal is who, inside a tenant, a credential speaks for, and
// what it may do: the sources it may emit as, the targets it may address,
// the event types it may subscribe to, the source domains it may read and
// whether it may send control. A Principal is made once at authentication
// (from an API key's line or a JWT's claims) and carried with the
// request's tenant; the bindings ask it before they write or subscribe.
//
// The vocabulary is dialect D's (security.md): subscribe:<type pattern>,
// read:<domain>, write:<domain>, plus the gateway's emit:<source pattern>
// (the sources a principal may use: D's source, R's agent) and control
// (AEP-0004 control). What a restricted principal's list does not grant it
// may not do, with one refinement: without read: scopes, every source of
// the types its subscribe: scopes allow may be read. A domain is a source or target prefix ("agent",
// "tool") or a whole pattern ("agent:a", "agent:*"). Patterns are globs in
// which '*' matches one or more characters, the way type patterns match.
//
// A credential without scopes has the tenant-wide default policy: it may
// do everything its tenant may, as before principals existed.
package principal

import (
	"fmt"
	"strings"
)

// Method is how a principal authenticated, as records carry it.
type Method string

const (
	MethodNone   Method = "none" // development mode: no credential
	MethodAPIKey Method = "api_key"
	MethodJWT    Method = "jwt"
	MethodMTLS   Method = "mtls" // a client certificate verified against --tls-client-ca
)

// Principal is one authenticated identity inside a tenant. The zero value
// and nil are the unnamed principal of development mode, unrestricted.
type Principal struct {
	ID     string // the key's principal= name, or "key:<digest prefix>"; a JWT's sub
	Method Method
	Scopes *Scopes // nil: the tenant-wide default, everything allowed
}

// Name is the principal's id, or "" for none.
func (p *Principal) Name() string {
	if p == nil {
		return ""
	}
	return p.ID
}

// scopes is p's scopes, nil (unrestricted) for a nil principal.
func (p *Principal) scopes() *Scopes {
	if p == nil {
		return nil
	}
	return p.Scopes
}

// Restricted reports whether p has scopes (is not tenant-wide).
func (p *Principal) Restricted() bool { return p.scopes() != nil }

// MayEmitAs reports whether p may publish events whose source (D) or
// agent (R) is src.
func (p *Principal) MayEmitAs(src string) bool {
	s := p.scopes()
	return s == nil || anyMatch(s.emit, src)
}

// MayTarget reports whether p may send an event to target.
func (p *Principal) MayTarget(target string) bool {
	s := p.scopes()
	return s == nil || anyMatch(s.write, target)
}

// MayControl reports whether p may send AEP-0004 control.
func (p *Principal) MayControl() bool {
	s := p.scopes()
	return s == nil || s.control
}

// MayRead reports whether p may receive an event of type typ from source
// src: a subscribe: scope matches the type and, when p has read: scopes,
// one of them the source.
func (p *Principal) MayRead(typ, src string) bool {
	s := p.scopes()
	return s == nil || (anyMatch(s.subscribe, typ) && (len(s.read) == 0 || anyMatch(s.read, src)))
}

// CoverTypes checks a subscription's type patterns (nil or empty: every
// type, as "*") against p's subscribe: scopes and returns the first
// pattern none covers, or "" when all are covered.
func (p *Principal) CoverTypes(patterns []string) string {
	s := p.scopes()
	if s == nil {
		return ""
	}
	return uncovered(s.subscribe, patterns)
}

// CoverSources checks a subscription's source filters against p's read:
// scopes (security.md: "for each source filter, check that the consumer
// has read: scope for the source domain") and returns the first one none
// covers, or "". A principal without read: scopes reads every source its
// subscribe: scopes allow; with them, no source filter asks for every
// source and needs a read: scope covering every one ("read:*").
func (p *Principal) CoverSources(sources []string) string {
	s := p.scopes()
	if s == nil || len(s.read) == 0 {
		return ""
	}
	return uncovered(s.read, sources)
}

// uncovered is the first of requested (none: "*", everything) that no
// scope pattern covers, or "".
func uncovered(scopes, requested []string) string {
	if len(requested) == 0 {
		requested = []string{"*"}
	}
	for _, r := range requested {
		if !anyMatch(scopes, r) {
			return r
		}
	}
	return ""
}

// Scopes is a parsed scope list. It is immutable.
type Scopes struct {
	subscribe, read, write, emit []string
	control                      bool
	src                          []string
}

// String is the scope list as given, space-separated (the JWT scope
// claim's form).
func (s *Scopes) String() string {
	if s == nil {
		return ""
	}
	return strings.Join(s.src, " ")
}

// MaxScopes bounds the scopes of one credential, and MaxScopeBytes one
// scope's length: a policy is checked on every event.
const (
	MaxScopes     = 64
	MaxScopeBytes = 256
)

// ParseScopes parses a scope list (the key file's scopes=, comma
// separated, or a JWT's scope claim, space separated: both are split on
// either). An empty list is a principal that may do nothing; use nil
// Scopes for the tenant-wide default.
func ParseScopes(list string) (*Scopes, error) {
	s := &Scopes{}
	for _, sc := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		if len(s.src) == MaxScopes {
			return nil, fmt.Errorf("more than %d scopes", MaxScopes)
		}
		if len(sc) > MaxScopeBytes {
			return nil, fmt.Errorf("scope %.32q... longer than %d bytes", sc, MaxScopeBytes)
		}
		s.src = append(s.src, sc)
		if sc == "control" {
			s.control = true
			continue
		}
		kind, arg, ok := strings.Cut(sc, ":")
		if !ok || arg == "" {
			return nil, fmt.Errorf("scope %q: want subscribe:<types>, read:<domain>, write:<domain>, emit:<source> or control", sc)
		}
		switch kind {
		case "subscribe":
			s.subscribe = append(s.subscribe, arg)
		case "read":
			s.read = append(s.read, domain(arg))
		case "write":
			s.write = append(s.write, domain(arg))
		case "emit":
			s.emit = append(s.emit, arg)
		default:
			return nil, fmt.Errorf("scope %q: unknown kind %q (subscribe, read, write, emit, control)", sc, kind)
		}
	}
	return s, nil
}

// domain turns a bare domain ("agent") into the pattern of its
// identities ("agent:*"); a pattern or identity ("agent:a", "*") stays.
func domain(arg string) string {
	if arg == "*" || strings.Contains(arg, ":") {
		return arg
	}
	return arg + ":*"
}

func anyMatch(patterns []string, s string) bool {
	for _, p := range patterns {
		if Match(p, s) {
			return true
		}
	}
	return false
}

// Match reports whether the glob pattern matches s: '*' matches one or
// more characters, every other byte itself. A '*' in s is an ordinary
// character, so Match(scope, requestedPattern) is true exactly when the
// scope covers everything the requested pattern can match.
func Match(pattern, s string) bool {
	// One backtrack point, the last '*': it first takes one character,
	// then one more each time what follows it fails. Linear in practice,
	// at worst the pattern's length times the subject's.
	p, i := 0, 0
	star, taken := -1, 0 // the last '*' and the index after what it took
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, taken = p, i+1
			p, i = p+1, i+1
		case p < len(pattern) && pattern[p] == s[i]:
			p, i = p+1, i+1
		case star >= 0:
			taken++
			p, i = star+1, taken
		default:
			return false
		}
	}
	return p == len(pattern)
}
