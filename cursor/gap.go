package cursor

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
)

// GapReason says why delivery cannot continue exactly where it was asked to.
type GapReason uint8

const (
	// GapRetention: the requested offset is below the partition's log start
	// offset; the events in between were deleted by retention.
	GapRetention GapReason = iota + 1
	// GapTopicRecreated: the topic was deleted and created again (its topic
	// ID changed); offsets of the old incarnation mean nothing now.
	GapTopicRecreated
	// GapPartitionsChanged: the partition count changed, so keys (sessions)
	// may now live in another partition than the one the cursor names.
	GapPartitionsChanged
	// GapTruncated: the requested offset is above the partition's high
	// watermark (unclean leader election, or an incarnation without topic
	// IDs): the log no longer holds what the cursor had seen.
	GapTruncated
)

func (r GapReason) String() string {
	switch r {
	case GapRetention:
		return "retention"
	case GapTopicRecreated:
		return "topic_recreated"
	case GapPartitionsChanged:
		return "partitions_changed"
	case GapTruncated:
		return "truncated"
	}
	return "unknown"
}

// Gap reports that delivery on Partition does not continue at Requested but
// at RestartAt, for Reason. Requested is -1 when no offset was asked for
// (a partition the cursor did not know). The gateway turns a Gap into the
// dialect's marker (R replay-exhausted, D an error or replay event).
type Gap struct {
	Partition int32
	Requested int64
	RestartAt int64
	Reason    GapReason
	// Earliest is, for a dialect R session resume, the first position of
	// the session still held (replay-exhausted's "earliest"); nil when the
	// session has no event left or the gap is not about a session.
	Earliest *Position
}

func (g Gap) String() string {
	return fmt.Sprintf("gap on partition %d: requested %d, restarting at %d (%s)", g.Partition, g.Requested, g.RestartAt, g.Reason)
}

// TopicState is what resuming needs to know of a topic right now.
type TopicState struct {
	Topic      string
	ID         TopicID
	Partitions int32
	Start      []int64 // log start offset per partition
	End        []int64 // high watermark per partition
	Leaders    []int32 // leader broker per partition, -1 when unknown
}

// LoadTopicState reads topic's ID, partition count and offset bounds.
// GrownTopicState is topic's state when it has more than known partitions
// (an operator added some), and false otherwise: one metadata request,
// and LoadTopicState's offset lists only when the topic grew, for readers
// that look for added partitions periodically.
func GrownTopicState(ctx context.Context, adm *kadm.Client, topic string, known int32) (TopicState, bool, error) {
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return TopicState{}, false, fmt.Errorf("cursor: metadata of %s: %w", topic, err)
	}
	td, ok := md.Topics[topic]
	if ok && td.Err != nil {
		return TopicState{}, false, fmt.Errorf("cursor: metadata of %s: %w", topic, td.Err)
	}
	if !ok || int32(len(td.Partitions)) <= known {
		return TopicState{}, false, nil
	}
	st, err := LoadTopicState(ctx, adm, topic)
	if err != nil || st.Partitions <= known {
		return TopicState{}, false, err
	}
	return st, true, nil
}

func LoadTopicState(ctx context.Context, adm *kadm.Client, topic string) (TopicState, error) {
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return TopicState{}, fmt.Errorf("cursor: metadata of %s: %w", topic, err)
	}
	td, ok := tds[topic]
	if !ok || td.Err != nil {
		return TopicState{}, fmt.Errorf("cursor: metadata of %s: %w", topic, td.Err)
	}
	st := TopicState{Topic: topic, ID: TopicID(td.ID), Partitions: int32(len(td.Partitions))}
	// The two listings are independent: ask for both at once.
	var (
		starts, ends kadm.ListedOffsets
		serr, eerr   error
		wg           sync.WaitGroup
	)
	wg.Go(func() { starts, serr = adm.ListStartOffsets(ctx, topic) })
	ends, eerr = adm.ListEndOffsets(ctx, topic)
	wg.Wait()
	if serr != nil {
		return TopicState{}, fmt.Errorf("cursor: start offsets of %s: %w", topic, serr)
	}
	if eerr != nil {
		return TopicState{}, fmt.Errorf("cursor: end offsets of %s: %w", topic, eerr)
	}
	st.Start = make([]int64, st.Partitions)
	st.End = make([]int64, st.Partitions)
	st.Leaders = make([]int32, st.Partitions)
	for p := int32(0); p < st.Partitions; p++ {
		st.Leaders[p] = -1
		if pd, ok := td.Partitions[p]; ok {
			st.Leaders[p] = pd.Leader
		}
		s, ok1 := starts.Lookup(topic, p)
		e, ok2 := ends.Lookup(topic, p)
		if !ok1 || !ok2 || s.Err != nil || e.Err != nil {
			return TopicState{}, fmt.Errorf("cursor: offsets of %s/%d unavailable", topic, p)
		}
		st.Start[p], st.End[p] = s.Offset, e.Offset
	}
	return st, nil
}

// Check maps a decoded cursor (or a committed frontier) onto the topic as
// it is now. It returns where to read each partition and the gaps: every
// place where that is not exactly the cursor's offset. A cursor naming all
// partitions of its time (a whole-topic stream) also gets the partitions
// added since, from their log start.
//
// Nothing is silent: a recreated topic restarts every partition at its log
// start with GapTopicRecreated; an offset below the log start restarts at
// the log start with GapRetention; one above the high watermark restarts at
// the high watermark with GapTruncated; a changed partition count is
// reported on every partition the cursor names with GapPartitionsChanged
// (delivery continues at the cursor's offset there: the caller decides
// whether a session-scoped stream must move).
func (s TopicState) Check(c Cursor) (start []PartitionOffset, gaps []Gap) {
	whole := len(c.Offsets) == int(c.Partitions)
	recreated := c.Topic != (TopicTag{}) && !s.ID.IsZero() && c.Topic != s.ID.Tag()
	resized := c.Partitions != s.Partitions
	for _, po := range c.Offsets {
		p := po.Partition
		if p >= s.Partitions {
			gaps = append(gaps, Gap{Partition: p, Requested: po.Offset, RestartAt: -1, Reason: GapPartitionsChanged})
			continue
		}
		switch {
		case recreated:
			gaps = append(gaps, Gap{Partition: p, Requested: po.Offset, RestartAt: s.Start[p], Reason: GapTopicRecreated})
			start = append(start, PartitionOffset{p, s.Start[p]})
			continue
		case po.Offset < s.Start[p]:
			gaps = append(gaps, Gap{Partition: p, Requested: po.Offset, RestartAt: s.Start[p], Reason: GapRetention})
			start = append(start, PartitionOffset{p, s.Start[p]})
		case po.Offset > s.End[p]:
			gaps = append(gaps, Gap{Partition: p, Requested: po.Offset, RestartAt: s.End[p], Reason: GapTruncated})
			start = append(start, PartitionOffset{p, s.End[p]})
		default:
			start = append(start, po)
		}
		if resized {
			at := start[len(start)-1].Offset
			gaps = append(gaps, Gap{Partition: p, Requested: po.Offset, RestartAt: at, Reason: GapPartitionsChanged})
		}
	}
	if whole {
		for p := c.Partitions; p < s.Partitions; p++ {
			reason := GapPartitionsChanged
			if recreated {
				reason = GapTopicRecreated
			}
			gaps = append(gaps, Gap{Partition: p, Requested: -1, RestartAt: s.Start[p], Reason: reason})
			start = append(start, PartitionOffset{p, s.Start[p]})
		}
	}
	return start, gaps
}

func sortOffsets(os []PartitionOffset) {
	slices.SortFunc(os, func(a, b PartitionOffset) int { return int(a.Partition) - int(b.Partition) })
}
