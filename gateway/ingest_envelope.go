package gateway

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/principal"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/internal/jsonscan"
)

// tokenVerifier verifies an event-level bearer token as a transport
// credential would be: its tenant and principal, or why it is refused.
// Nil in development mode, where nothing can be verified.
type tokenVerifier func(token string) (tenant string, p *principal.Principal, err error)

// checkPublisher refuses, with the dialect's unauthorized, the events
// the credential may not publish (issue 24), and reports how many:
//
//   - a source (D) or agent (R; its source when it names none) outside a
//     restricted principal's emit: scopes: one agent's key cannot speak
//     as another;
//   - a target (D) outside its write: scopes;
//   - dialect D's tenant_id other than the authenticated tenant: the
//     event would be stored in and delivered to this tenant while
//     claiming another;
//   - dialect D's event-level authorization of a scheme other than
//     bearer (security.md: a producer that does not support the requested
//     scheme must reject the event with unauthorized), or a bearer token
//     that verify refuses, that names another tenant, or whose principal's
//     scopes do not allow the event. A verified one is accepted: the
//     event's member is cut from the bytes written (the one exception to
//     "stored as received": the token never reaches the log or a
//     subscriber) and its principal named in the record's
//     aep-event-principal header.
//
// The envelope is decoded again only for the events whose envelope has
// tenant_id or authorization (the parser marks them in Attrs.Claims,
// escaped names included), and an unrestricted principal skips the scope
// checks, so the common event costs two comparisons.
func checkPublisher(d aep.Dialect, t tenant.Tenant, verify tokenVerifier, outs []outcome) (refused int) {
	p := t.Principal()
	restricted := p.Restricted()
	for i := range outs {
		o := &outs[i]
		if o.parseErr != nil {
			continue
		}
		msg := ""
		if restricted {
			msg = scopeError(d, p, &o.attrs)
		}
		if msg == "" && d == aep.DialectD && o.attrs.Claims != 0 {
			msg = envelopeAuthError(o, t.String(), verify)
		}
		if msg == "" {
			continue
		}
		code := aep.CodeDUnauthorized
		if d == aep.DialectR {
			code = aep.CodeRUnauthorized
		}
		o.parseErr = &aep.Error{Dialect: d, Kind: aep.KindInvalid, Code: code, Message: msg, Offset: -1}
		refused++
	}
	return refused
}

// scopeError is why p may not publish the event of a, or "".
func scopeError(d aep.Dialect, p *principal.Principal, a *aep.Attrs) string {
	as, what := a.Source, "source"
	if d == aep.DialectR && a.Agent != "" {
		as, what = a.Agent, "agent"
	}
	if !p.MayEmitAs(as) {
		return fmt.Sprintf("principal %s may not publish as %s %s (its emit: scopes do not cover it): the event was not written",
			aep.QuoteTrunc(p.ID), what, aep.QuoteTrunc(as))
	}
	if a.Target != "" && !p.MayTarget(a.Target) {
		return fmt.Sprintf("principal %s may not send to target %s (its write: scopes do not cover it): the event was not written",
			aep.QuoteTrunc(p.ID), aep.QuoteTrunc(a.Target))
	}
	return ""
}

// envelopeAuthError is why o's tenant_id or authorization is refused, or
// "". A verified bearer authorization is cut from o.raw and its principal
// kept in o.eventPrincipal.
func envelopeAuthError(o *outcome, tenant string, verify tokenVerifier) string {
	var m struct {
		TenantID      json.RawMessage `json:"tenant_id"`
		Authorization json.RawMessage `json:"authorization"`
	}
	if err := json.Unmarshal(o.raw, &m); err != nil {
		return "" // parsed before: cannot happen; the event stands as parsed
	}
	if len(m.TenantID) > 0 && string(m.TenantID) != "null" {
		var id string
		if json.Unmarshal(m.TenantID, &id) != nil {
			return "tenant_id must be a string naming the tenant the credential authenticates: the event was not written"
		}
		if id != tenant {
			return fmt.Sprintf("tenant_id %s is not the tenant the credential authenticates (%q): the event was not written", aep.QuoteTrunc(id), tenant)
		}
	}
	if len(m.Authorization) == 0 || string(m.Authorization) == "null" {
		return ""
	}
	var a struct {
		Scheme string `json:"scheme"`
		Token  string `json:"token"`
	}
	_ = json.Unmarshal(m.Authorization, &a)
	scheme := strings.ToLower(a.Scheme)
	if scheme != "bearer" || verify == nil {
		return fmt.Sprintf("event-level authorization (scheme %s) is not supported: only bearer, verified like the Authorization header (and not in development mode); the event was not written, so its token is not in the log", aep.QuoteTrunc(scheme))
	}
	tn, p, err := verify(a.Token)
	switch {
	case err != nil:
		return "event-level bearer token refused: " + err.Error() + "; the event was not written, so its token is not in the log"
	case tn != tenant:
		return fmt.Sprintf("event-level bearer token is of another tenant than the credential's (%q): the event was not written", tenant)
	}
	if p.Restricted() {
		if msg := scopeError(aep.DialectD, p, &o.attrs); msg != "" {
			return "event-level bearer token: " + msg
		}
	}
	raw, ok := cutMember(o.raw, "authorization")
	if !ok {
		return "event-level authorization could not be removed from the event: the event was not written"
	}
	o.raw, o.size = raw, len(raw)
	o.eventPrincipal = []byte(p.Name())
	return ""
}

// cutMember returns a copy of the JSON object raw without its top-level
// members named name (escaped spellings included), and whether raw was an
// object.
func cutMember(raw []byte, name string) ([]byte, bool) {
	start := jsonscan.SkipSpace(raw, 0)
	out := append([]byte(nil), raw...)
	for {
		it := jsonscan.Object(out, start)
		prevEnd, cut := -1, false
		for m, ok := it.Next(); ok; m, ok = it.Next() {
			if jsonscan.StringEquals(out[m.Name:m.NameEnd], name) {
				from, to := jsonscan.CutMember(prevEnd, m.Name, m.End, m.Next)
				out = append(out[:from], out[to:]...)
				cut = true
				break
			}
			prevEnd = m.End
		}
		if !cut {
			return out, it.End() >= 0
		}
	}
}
