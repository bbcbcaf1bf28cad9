package dialectr

import (
	"strings"

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
	if a.Session == "" || !a.HasSeq || strings.ContainsAny(a.Session, "\r\n\x00") {
		return cursor.Position{}, false
	}
	p := cursor.Position{Session: a.Session, Seq: a.Seq}
	if a.HasEpoch {
		p.Epoch = a.Epoch
	}
	return p, true
}
