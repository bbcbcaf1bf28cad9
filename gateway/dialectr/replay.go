package dialectr

import (
	"context"
	"fmt"

	"github.com/aep-gateway/aep-gateway/aep"
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

// plan is where a subscription starts: the engine's From and the gate
// that shapes the catch-up (and carries the replay-exhausted markers).
type plan struct {
	from []cursor.PartitionOffset // nil: live
	gate *replayGate              // nil: live
}

// newGate is a gate for a catch-up that reads below the request moment
// liveFrom.
func (rl *Relay) newGate(liveFrom []int64, noLive bool) *replayGate {
	return &replayGate{
		liveFrom: append([]int64(nil), liveFrom...),
		seen:     map[dedupeKey]struct{}{},
		max:      rl.cfg.Dedupe,
		buffer:   rl.cfg.ReplayBuffer,
		noLive:   noLive,
	}
}

// planResume resolves positions to partition offsets. Every partition is
// read from the moment of the request (its end offset then) except where a
// named session needs older events: there reading starts at the lowest
// resolved offset, and the gate keeps, below the request moment, only the
// named sessions' events strictly after their positions, at most the
// ReplayBuffer latest of each (the held window, docs/relay.md). With all
// (replay-all, AEP-0003 §5), every partition is read from its log start and
// the gate keeps every session-scoped event below the request moment; no
// replay-exhausted is sent for it (§5 honesty rule 2). noLive (live=0)
// makes the gate drop everything at or past the request moment.
func (rl *Relay) planResume(ctx context.Context, tn tenant.Tenant, positions []cursor.Position, all, noLive bool) (*plan, error) {
	if all {
		st, err := rl.cfg.Engine.State(ctx, tn)
		if err != nil {
			return nil, fmt.Errorf("dialectr: topic state: %w", err)
		}
		g := rl.newGate(st.End, noLive)
		g.all = true
		pl := &plan{gate: g}
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
	g := rl.newGate(st.End, noLive)
	g.sessions = make(map[string]*heldSession, len(positions))
	start := append([]int64(nil), st.End...)
	pl := &plan{gate: g}
	for _, pos := range positions {
		r, err := res.Resolve(ctx, pos)
		if err != nil {
			return nil, fmt.Errorf("dialectr: resolve %s: %w", pos, err)
		}
		hs := &heldSession{pos: pos, from: r.Offset}
		if r.Gap != nil {
			hs.gap, hs.gapEarliest = true, r.Gap.Earliest
		}
		g.sessions[pos.Session] = hs
		g.order = append(g.order, pos.Session)
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

// gateItem is one thing a gate lets out, in order: an event, or a
// replay-exhausted marker (mark set, ev nil).
type gateItem struct {
	ev   *engine.Event
	mark *exhausted
}

// heldSession is a named session of a resume: its position, the retention
// gap the resolver reported, and the held window of its replayed events.
type heldSession struct {
	pos         cursor.Position
	gap         bool             // the log lost events after pos (retention)
	gapEarliest *cursor.Position // the first the log holds, with gap
	ring        []*engine.Event  // held window, oldest first from head
	head        int
	from        int64 // resolved offset: the log after the position
	bytes       int   // of the held events' values
	evicted     bool  // the window dropped an event: pos predates it
	flushed     bool  // marker and window sent; later events pass through
}

// replayGate decides, during a catch-up, which events go out. It is owned
// by one stream's goroutine.
type replayGate struct {
	sessions map[string]*heldSession // named sessions, by name
	order    []string                // named sessions in request order
	all      bool                    // replay-all: every session-scoped event
	liveFrom []int64                 // per partition: end offset at the request
	seen     map[dedupeKey]struct{}  // replayed (source, id), bounded by max
	max      int
	buffer   int  // events held per named session; <= 0: no bound
	held     int  // bytes held in the windows
	noLive   bool // live=0: nothing at or past the request moment
}

// offer appends to out what goes out for a catch-up event. At or above the
// request moment every event is live and goes out as received (after the
// held window of its session, which it follows in the partition; nothing
// with noLive). Below it, only a named session's events strictly after
// its position, each (source, id) once, into the session's held window of
// at most buffer events, which goes out, after its replay-exhausted marker
// when the window dropped events or the log lost some, at the session's
// first live event or at flush.
func (g *replayGate) offer(ev *engine.Event, out []gateItem) []gateItem {
	a := &ev.Attrs
	p := ev.Record.Partition
	if int(p) >= len(g.liveFrom) || ev.Record.Offset >= g.liveFrom[p] {
		if g.noLive {
			return out
		}
		if hs := g.sessions[a.Session]; hs != nil && !hs.flushed {
			out = hs.flush(out)
		}
		return append(out, gateItem{ev: ev})
	}
	var hs *heldSession
	if g.all {
		if a.Session == "" {
			return out // replay-all replays session buffers
		}
	} else {
		hs = g.sessions[a.Session]
		if hs == nil || !hs.follows(a, ev.Record.Offset) {
			return out
		}
	}
	if a.ID != "" {
		k := dedupeKey{a.Source, a.ID}
		if _, dup := g.seen[k]; dup {
			return out
		}
		if len(g.seen) < g.max {
			g.seen[k] = struct{}{}
		}
	}
	if hs == nil || hs.flushed {
		return append(out, gateItem{ev: ev})
	}
	if g.buffer <= 0 {
		// No held window: the marker of a retention gap, then events as
		// they come.
		return append(hs.flush(out), gateItem{ev: ev})
	}
	g.held += hs.hold(ev, g.buffer)
	if g.held > maxHeldBytes {
		// Memory first: this session's window goes out now, and its
		// later replayed events pass through (more than buffer of them).
		g.held -= hs.bytes
		out = hs.flush(out)
	}
	return out
}

// maxHeldBytes bounds the bytes of the held windows of one stream.
const maxHeldBytes = 32 << 20

// follows reports whether a replayed event of the session comes after the
// resume position: a positioned event when it is strictly after it; one
// without seq (a command, attention.routed: AEP-0001 §5.2's foreign
// emitters) when the log holds it after the session's last event at or
// before the position (the resolved offset).
func (hs *heldSession) follows(a *aep.Attrs, offset int64) bool {
	if !a.HasSeq {
		return offset >= hs.from
	}
	epoch := int64(0)
	if a.HasEpoch {
		epoch = a.Epoch
	}
	return hs.pos.After(epoch, a.Seq)
}

// flush appends every named session's marker and held window not sent
// yet, in request order: the catch-up is over.
func (g *replayGate) flush(out []gateItem) []gateItem {
	g.held = 0
	for _, s := range g.order {
		if hs := g.sessions[s]; !hs.flushed {
			out = hs.flush(out)
		}
	}
	return out
}

// hold adds ev to the window, dropping the oldest past n, and returns
// the change of the window's bytes.
func (hs *heldSession) hold(ev *engine.Event, n int) int {
	size := len(ev.Record.Value)
	if len(hs.ring) < n {
		hs.ring = append(hs.ring, ev)
		hs.bytes += size
		return size
	}
	size -= len(hs.ring[hs.head].Record.Value)
	hs.ring[hs.head] = ev
	hs.head = (hs.head + 1) % n
	hs.evicted = true
	hs.bytes += size
	return size
}

// flush appends the session's replay-exhausted marker (when its position
// predates what is held: the window dropped events, or retention did) and
// its held window, oldest first, and lets later events pass.
func (hs *heldSession) flush(out []gateItem) []gateItem {
	hs.flushed = true
	n := len(hs.ring)
	if hs.evicted || hs.gap {
		m := exhausted{Session: hs.pos.Session, Earliest: hs.gapEarliest}
		for i := 0; i < n; i++ { // the first held event with a position
			if first, ok := positionOf(&hs.ring[(hs.head+i)%n].Attrs); ok {
				m.Earliest = &first
				break
			}
		}
		out = append(out, gateItem{mark: &m})
	}
	for i := 0; i < n; i++ {
		out = append(out, gateItem{ev: hs.ring[(hs.head+i)%n]})
	}
	hs.ring = nil
	return out
}
