package dialectr

import (
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/principal"
)

// readable reports whether p may receive ev: an R stream is narrowed to
// the types p's subscribe: scopes allow and, when it has read: scopes,
// the agents (or, for an event naming none, the sources) they cover
// (issue 24). The check runs where an event is written to the client,
// after the filter and the replay window, so every path an event takes to
// a stream (live tail, catch-up, the filter workers' feed) passes it, and
// an event skipped here is one the filter never matched, as far as the
// client's positions go. A tenant-wide principal skips it.
func readable(p *principal.Principal, ev *engine.Event) bool {
	if !p.Restricted() {
		return true
	}
	from := ev.Attrs.Agent
	if from == "" {
		from = ev.Attrs.Source
	}
	return p.MayRead(ev.Attrs.Type, from)
}
