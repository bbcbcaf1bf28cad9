package dialectd

import (
	"fmt"
	"net/http"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// scopeRefusal is why t's principal may not subscribe with f, or "":
// security.md's subscription enforcement, every types pattern covered by
// a subscribe: scope and every source filter by a read: scope. The
// message names the principal and the pattern, as security.md's example
// does. Checked on every way a stream starts (SSE, WebSocket, a durable
// subscription's creation and each attach), so a durable subscription
// made by a broader principal is not a way around it.
func scopeRefusal(t tenant.Tenant, f *filtering.Filter) string {
	p := t.Principal()
	if !p.Restricted() {
		return ""
	}
	if bad := p.CoverTypes(f.TypePatterns()); bad != "" {
		return fmt.Sprintf("%s is not authorized to subscribe to %s (no subscribe: scope covers it)", aep.QuoteTrunc(p.ID), aep.QuoteTrunc(bad))
	}
	if bad := p.CoverSources(f.Sources()); bad != "" {
		what := "source " + aep.QuoteTrunc(bad)
		if bad == "*" {
			what = "every source (the filter names none)"
		}
		return fmt.Sprintf("%s is not authorized to read %s (no read: scope covers it)", aep.QuoteTrunc(p.ID), what)
	}
	return ""
}

// refuseScope answers an HTTP subscription refused by scopeRefusal: 403
// unauthorized (the credential is valid; what it asks for is not
// allowed). It reports whether it answered.
func refuseScope(w http.ResponseWriter, t tenant.Tenant, f *filtering.Filter) bool {
	msg := scopeRefusal(t, f)
	if msg == "" {
		return false
	}
	writeErr(w, http.StatusForbidden, aep.CodeDUnauthorized, msg, false, nil)
	return true
}
