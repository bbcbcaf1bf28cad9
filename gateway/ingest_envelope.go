package gateway

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/principal"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

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
//   - dialect D's event-level authorization: security.md asks a producer
//     that does not support the requested scheme to reject the event with
//     unauthorized, and the gateway supports none (the transport's
//     credential authenticates); refusing it also keeps its token out of
//     the log and away from every subscriber.
//
// The envelope is decoded again only for the events whose envelope has
// tenant_id or authorization (the parser marks them in Attrs.Claims,
// escaped names included), and an unrestricted principal skips the scope
// checks, so the common event costs two comparisons.
func checkPublisher(d aep.Dialect, t tenant.Tenant, outs []outcome) (refused int) {
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
			msg = envelopeAuthError(o.raw, t.String())
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

// envelopeAuthError is why raw's tenant_id or authorization is refused,
// or "".
func envelopeAuthError(raw []byte, tenant string) string {
	var m struct {
		TenantID      json.RawMessage `json:"tenant_id"`
		Authorization json.RawMessage `json:"authorization"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
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
	if len(m.Authorization) > 0 && string(m.Authorization) != "null" {
		var a struct {
			Scheme string `json:"scheme"`
		}
		_ = json.Unmarshal(m.Authorization, &a)
		return fmt.Sprintf("event-level authorization (scheme %s) is not supported: the transport's credential (Authorization header, access_token) authenticates every event; the event was not written, so its token is not in the log", aep.QuoteTrunc(strings.ToLower(a.Scheme)))
	}
	return ""
}
