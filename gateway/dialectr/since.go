package dialectr

import (
	"context"
	"fmt"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// planSince is the plan of a since=D stream (an extension, not AEP-0003):
// replay-all (every session-scoped event below the request moment, no
// replay-exhausted) read from the first offset of each partition whose
// record the gateway wrote at most d ago, then live unless noLive. The
// broker's timestamp index decides, so every node starts at the same
// offsets.
func (rl *Relay) planSince(ctx context.Context, tn tenant.Tenant, d time.Duration, noLive bool) (*plan, error) {
	from, err := rl.cfg.Engine.OffsetsAfter(ctx, tn, time.Now().Add(-d))
	if err != nil {
		return nil, fmt.Errorf("dialectr: since: %w", err)
	}
	st, err := rl.cfg.Engine.State(ctx, tn)
	if err != nil {
		return nil, fmt.Errorf("dialectr: topic state: %w", err)
	}
	g := rl.newGate(st.End, noLive)
	g.all = true
	return &plan{gate: g, from: from}, nil
}
