package dialectr

import (
	"context"
	"fmt"

	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// exhausted is one replay-exhausted marker: the session's requested
// position predates what the log holds. Earliest is the session's first
// held position, nil when the log holds nothing of it.
type exhausted struct {
	Session  string
	Earliest *cursor.Position
}

// plan is where a subscription starts: the engine's From, the markers to
// send first, and the gate that shapes the catch-up.
type plan struct {
	from      []cursor.PartitionOffset // nil: live
	exhausted []exhausted
	gate      *replayGate // nil: live
}

// planResume resolves positions to partition offsets. Every partition is
// read from the moment of the request (its end offset then) except where a
// named session needs older events: there reading starts at the lowest
// resolved offset, and the gate keeps, below the request moment, only the
// named sessions' events strictly after their positions. With all
// (replay-all, AEP-0003 §5), every partition is read from its log start and
// the gate keeps every session-scoped event below the request moment; no
// replay-exhausted is sent for it (§5 honesty rule 2).
func (rl *Relay) planResume(ctx context.Context, tn tenant.Tenant, positions []cursor.Position, all bool) (*plan, error) {
	if all {
		st, err := rl.cfg.Engine.State(ctx, tn)
		if err != nil {
			return nil, fmt.Errorf("dialectr: topic state: %w", err)
		}
		pl := &plan{gate: &replayGate{all: true, liveFrom: append([]int64(nil), st.End...), seen: map[dedupeKey]struct{}{}, max: rl.cfg.Dedupe}}
		pl.from = make([]cursor.PartitionOffset, len(st.Start))
		for p, off := range st.Start {
			pl.from[p] = cursor.PartitionOffset{Partition: int32(p), Offset: off}
		}
		return pl, nil
	}
	if len(positions) == 0 {
		return &plan{}, nil
	}
	res, err := rl.resolver(ctx, tn.String())
	if err != nil {
		return nil, err
	}
	st, err := rl.cfg.Engine.State(ctx, tn)
	if err != nil {
		return nil, fmt.Errorf("dialectr: topic state: %w", err)
	}
	g := &replayGate{
		sessions: make(map[string]cursor.Position, len(positions)),
		liveFrom: append([]int64(nil), st.End...),
		seen:     map[dedupeKey]struct{}{},
		max:      rl.cfg.Dedupe,
	}
	start := append([]int64(nil), st.End...)
	pl := &plan{gate: g}
	for _, pos := range positions {
		r, err := res.Resolve(ctx, pos)
		if err != nil {
			return nil, fmt.Errorf("dialectr: resolve %s: %w", pos, err)
		}
		if r.Gap != nil {
			pl.exhausted = append(pl.exhausted, exhausted{Session: pos.Session, Earliest: r.Gap.Earliest})
		}
		g.sessions[pos.Session] = pos
		if int(r.Partition) < len(start) && r.Offset < start[r.Partition] {
			start[r.Partition] = r.Offset
		}
	}
	pl.from = make([]cursor.PartitionOffset, len(start))
	for p, off := range start {
		pl.from[p] = cursor.PartitionOffset{Partition: int32(p), Offset: off}
	}
	return pl, nil
}

type dedupeKey struct{ source, id string }

// replayGate decides, during a catch-up, which events go out. It is owned
// by one stream's goroutine.
type replayGate struct {
	sessions map[string]cursor.Position // named sessions' resume positions
	all      bool                       // replay-all: every session-scoped event
	liveFrom []int64                    // per partition: end offset at the request
	seen     map[dedupeKey]struct{}     // replayed (source, id), bounded by max
	max      int
}

// admit reports whether a catch-up event is delivered: at or above the
// request moment every event is live and goes out as received; below it,
// only a named session's events strictly after its position, each
// (source, id) once.
func (g *replayGate) admit(ev *engine.Event) bool {
	p := ev.Record.Partition
	if int(p) >= len(g.liveFrom) || ev.Record.Offset >= g.liveFrom[p] {
		return true
	}
	a := &ev.Attrs
	if g.all {
		if a.Session == "" || !a.HasSeq {
			return false // replay-all replays session buffers
		}
	} else {
		pos, ok := g.sessions[a.Session]
		if !ok || !a.HasSeq {
			return false
		}
		epoch := int64(0)
		if a.HasEpoch {
			epoch = a.Epoch
		}
		if !pos.After(epoch, a.Seq) {
			return false
		}
	}
	if a.ID == "" {
		return true
	}
	k := dedupeKey{a.Source, a.ID}
	if _, dup := g.seen[k]; dup {
		return false
	}
	if len(g.seen) < g.max {
		g.seen[k] = struct{}{}
	}
	return true
}
