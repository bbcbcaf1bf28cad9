package cursor

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Committer stores a durable subscription's frontier as the committed
// offsets of its consumer group, so that any Kafka tool (kadm,
// kafka-consumer-groups.sh) shows where the subscription stands and a
// client that reconnects without a cursor resumes from them. The commit
// metadata string records the topic tag and partition count, so a frontier
// read back is checked against the topic like any client cursor.
//
// A Committer is safe for concurrent use; commits of one group should come
// from one owner, or later commits may be overwritten by earlier ones.
type Committer struct {
	adm   *kadm.Client
	group string
}

// NewCommitter returns a Committer for group (the caller names it, for
// example "aep.<tenant>.sub.<id>"), committing through adm.
func NewCommitter(adm *kadm.Client, group string) *Committer {
	return &Committer{adm: adm, group: group}
}

// Group is the consumer group the frontier is committed to.
func (c *Committer) Group() string { return c.group }

const commitMetaPrefix = "aep1:"

func commitMeta(tag TopicTag, parts int32) string {
	return commitMetaPrefix + hex.EncodeToString(tag[:]) + ":" + strconv.Itoa(int(parts))
}

func parseCommitMeta(s string) (TopicTag, int32, bool) {
	var tag TopicTag
	rest, ok := strings.CutPrefix(s, commitMetaPrefix)
	if !ok {
		return tag, 0, false
	}
	h, n, ok := strings.Cut(rest, ":")
	b, err := hex.DecodeString(h)
	if !ok || err != nil || len(b) != len(tag) {
		return tag, 0, false
	}
	parts, err := strconv.Atoi(n)
	if err != nil || parts <= 0 || parts > MaxPartitions {
		return tag, 0, false
	}
	copy(tag[:], b)
	return tag, int32(parts), true
}

// Commit stores c's offsets for topic. A partition the group has no commit
// for yet gets one; partitions not in c are left alone.
func (c *Committer) Commit(ctx context.Context, topic string, cur Cursor) error {
	if len(cur.Offsets) == 0 {
		return nil
	}
	meta := commitMeta(cur.Topic, cur.Partitions)
	var os kadm.Offsets
	for _, po := range cur.Offsets {
		os.Add(kadm.Offset{Topic: topic, Partition: po.Partition, At: po.Offset, LeaderEpoch: -1, Metadata: meta})
	}
	err := RetryCoordinator(ctx, func() error {
		resps, err := c.adm.CommitOffsets(ctx, c.group, os)
		if err == nil {
			err = resps.Error()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("cursor: commit %s: %w", c.group, err)
	}
	return nil
}

// RetryCoordinator runs op again while the group coordinator is not ready
// (a fresh cluster creates __consumer_offsets on the first group request and
// answers COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS until it
// has; a moved coordinator answers NOT_COORDINATOR). These come back inside
// the response, where the client does not retry them. Other errors, and the
// end of ctx, end the loop with op's last error.
func RetryCoordinator(ctx context.Context, op func() error) error {
	backoff := 25 * time.Millisecond
	for {
		err := op()
		if err == nil || !(errors.Is(err, kerr.CoordinatorNotAvailable) ||
			errors.Is(err, kerr.CoordinatorLoadInProgress) || errors.Is(err, kerr.NotCoordinator)) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		if backoff < time.Second {
			backoff *= 2
		}
	}
}

// Fetch reads the group's committed frontier for topic. found is false when
// the group has committed nothing for topic. Topic and Partitions come from
// the commit metadata (zero Topic when it was committed by another tool);
// Sequence is zero: delivery sequences are per stream, not per group.
func (c *Committer) Fetch(ctx context.Context, topic string) (cur Cursor, found bool, err error) {
	var resps kadm.OffsetResponses
	err = RetryCoordinator(ctx, func() error {
		var err error
		resps, err = c.adm.FetchOffsetsForTopics(ctx, c.group, topic)
		if err == nil {
			err = resps.Error()
		}
		return err
	})
	if errors.Is(err, kerr.GroupIDNotFound) {
		return Cursor{}, false, nil // a subscription that never committed
	}
	if err != nil {
		return Cursor{}, false, fmt.Errorf("cursor: fetch offsets of %s: %w", c.group, err)
	}
	for _, o := range resps[topic] {
		if o.At < 0 {
			continue // requested but never committed
		}
		if tag, parts, ok := parseCommitMeta(o.Metadata); ok {
			cur.Topic, cur.Partitions = tag, parts
		}
		cur.Offsets = append(cur.Offsets, PartitionOffset{Partition: o.Partition, Offset: o.At})
	}
	sortOffsets(cur.Offsets)
	if cur.Partitions == 0 && len(cur.Offsets) > 0 {
		cur.Partitions = cur.Offsets[len(cur.Offsets)-1].Partition + 1
	}
	return cur, len(cur.Offsets) > 0, nil
}
