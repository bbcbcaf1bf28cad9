package dialectr

import (
	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
)

// eventBytes is what a client with this capture ceiling receives: the
// stored bytes, or their down-levelled copy when the event's capture is
// above the ceiling (AEP-0003 §6.4; never up-levelled). A ceiling of 0 is
// "as stored". An error means the event must not be delivered.
func (rl *Relay) eventBytes(ev *engine.Event, ceiling aep.Capture) ([]byte, error) {
	raw := ev.Record.Value
	if ceiling == 0 || !aep.NeedsDownlevel(&ev.Attrs, ceiling) {
		return raw, nil
	}
	out, _, err := aep.Downlevel(raw, ceiling, rl.cfg.Limits)
	return out, err
}

// positionOf is the event's resume position, when it has one: a session
// and a seq (an absent epoch is 0). Agent-scoped events have none, and
// neither has a session that cannot travel in an SSE id: line.
func positionOf(a *aep.Attrs) (cursor.Position, bool) {
	if a.Session == "" || !a.HasSeq || breaksLine(a.Session, true) {
		return cursor.Position{}, false
	}
	p := cursor.Position{Session: a.Session, Seq: a.Seq}
	if a.HasEpoch {
		p.Epoch = a.Epoch
	}
	return p, true
}

// breaksLine reports whether s holds a CR or LF (or, with nul, a NUL): what
// cannot travel in an SSE field. A loop over the bytes: it runs for every
// delivery, where strings.ContainsAny's search per byte of s cost 8 % of a
// single-event fan-out profile.
func breaksLine(s string, nul bool) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '\n' || c == '\r' || (nul && c == 0) {
			return true
		}
	}
	return false
}
