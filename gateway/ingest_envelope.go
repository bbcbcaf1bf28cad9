package gateway

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/aep-gateway/aep-gateway/aep"
)

// checkEnvelopeAuth refuses, with unauthorized, the dialect D events whose
// envelope claims what the transport credential does not give (issue 24):
//
//   - tenant_id other than the authenticated tenant: the event would be
//     stored in and delivered to this tenant while claiming another.
//   - an event-level authorization: security.md asks a producer that does
//     not support the requested scheme to reject the event with
//     unauthorized, and the gateway supports none yet (the transport's
//     credential authenticates); refusing it also keeps its token out of
//     the log and away from every subscriber.
//
// Only events whose envelope has either member (the parser marks them in
// Attrs.Claims, escaped names included) are decoded again, so the common
// event costs nothing.
func checkEnvelopeAuth(d aep.Dialect, tenant string, outs []outcome) {
	if d != aep.DialectD {
		return
	}
	for i := range outs {
		o := &outs[i]
		if o.parseErr != nil || o.attrs.Claims == 0 {
			continue
		}
		if msg := envelopeAuthError(o.raw, tenant); msg != "" {
			o.parseErr = &aep.Error{Dialect: d, Kind: aep.KindInvalid, Code: aep.CodeDUnauthorized, Message: msg, Offset: -1}
		}
	}
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
