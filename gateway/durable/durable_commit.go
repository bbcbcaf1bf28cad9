package durable

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// MaxCommittedAttempts bounds the pending offsets whose attempt counts one
// partition's commit metadata carries (Kafka's default
// offset.metadata.max.bytes is 4096).
const MaxCommittedAttempts = 128

// partCommit is what a durable subscription commits for one partition: the
// committable offset (every event below it was acknowledged, filtered out
// or dead-lettered) and, in the commit metadata, how far it had read
// (ReadEnd) and the attempts made for each still pending offset between the
// two. An offset in [Offset, ReadEnd) that is not in Attempts was done.
// Journal is the offset of the checkpoint in the subscription journal the
// commit reflects (-1: none) and Holder the epoch of the stream holding the
// subscription (0: none).
type partCommit struct {
	Partition int32
	Offset    int64
	ReadEnd   int64
	Attempts  map[int64]int
	Journal   int64
	Holder    int64
}

// commitMeta is "aep1:<topic tag hex>:<partitions>" (the cursor package's
// commit metadata) followed, when there is read-ahead state, by
// ":r=<readEnd-offset>:a=<delta>.<attempts>,..." with deltas from Offset,
// ascending, then ":j=<journal offset>" and ":h=<holder epoch>" when set.
func commitMeta(tag cursor.TopicTag, parts int32, pc partCommit) string {
	var b strings.Builder
	b.WriteString("aep1:")
	b.WriteString(hex.EncodeToString(tag[:]))
	b.WriteByte(':')
	b.WriteString(strconv.Itoa(int(parts)))
	if pc.ReadEnd > pc.Offset {
		b.WriteString(":r=")
		b.WriteString(strconv.FormatInt(pc.ReadEnd-pc.Offset, 10))
		b.WriteString(":a=")
		offs := make([]int64, 0, len(pc.Attempts))
		for o := range pc.Attempts {
			offs = append(offs, o)
		}
		sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
		for i, o := range offs {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(o-pc.Offset, 10))
			b.WriteByte('.')
			b.WriteString(strconv.Itoa(pc.Attempts[o]))
		}
	}
	if pc.Journal >= 0 {
		b.WriteString(":j=")
		b.WriteString(strconv.FormatInt(pc.Journal, 10))
	}
	if pc.Holder > 0 {
		b.WriteString(":h=")
		b.WriteString(strconv.FormatInt(pc.Holder, 10))
	}
	return b.String()
}

// parseCommitMeta reads back commitMeta. ok is false for metadata another
// tool wrote; the read-ahead state is then empty (every event from the
// committed offset on is delivered as new).
func parseCommitMeta(meta string, off int64) (tag cursor.TopicTag, parts int32, pc partCommit, ok bool) {
	pc = partCommit{Offset: off, ReadEnd: off, Journal: -1}
	f := strings.Split(meta, ":")
	if len(f) < 3 || f[0] != "aep1" {
		return tag, 0, pc, false
	}
	b, err := hex.DecodeString(f[1])
	n, err2 := strconv.Atoi(f[2])
	if err != nil || err2 != nil || len(b) != len(tag) || n <= 0 || n > cursor.MaxPartitions {
		return tag, 0, pc, false
	}
	copy(tag[:], b)
	parts = int32(n)
	var r int64
	var list string
	hasList := false
	for _, kv := range f[3:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "r":
			r, _ = strconv.ParseInt(v, 10, 64)
		case "a":
			list, hasList = v, true
		case "j":
			if j, err := strconv.ParseInt(v, 10, 64); err == nil && j >= 0 {
				pc.Journal = j
			}
		case "h":
			if h, err := strconv.ParseInt(v, 10, 64); err == nil && h > 0 {
				pc.Holder = h
			}
		}
	}
	if !hasList || r <= 0 || r > 1<<40 {
		return tag, parts, pc, true
	}
	att := map[int64]int{}
	if list != "" {
		for _, e := range strings.Split(list, ",") {
			d, a, found := strings.Cut(e, ".")
			dv, err1 := strconv.ParseInt(d, 10, 64)
			av, err2 := strconv.Atoi(a)
			if !found || err1 != nil || err2 != nil || dv < 0 || dv >= r || av < 0 || len(att) >= MaxCommittedAttempts {
				return tag, parts, pc, true // damaged: deliver everything again as new
			}
			att[off+dv] = av
		}
	}
	pc.ReadEnd, pc.Attempts = off+r, att
	return tag, parts, pc, true
}

// commitDurable commits pcs for topic to group.
func commitDurable(ctx context.Context, adm *kadm.Client, group, topic string, tag cursor.TopicTag, parts int32, pcs []partCommit) error {
	if len(pcs) == 0 {
		return nil
	}
	var os kadm.Offsets
	for _, pc := range pcs {
		os.Add(kadm.Offset{Topic: topic, Partition: pc.Partition, At: pc.Offset, LeaderEpoch: -1, Metadata: commitMeta(tag, parts, pc)})
	}
	err := cursor.RetryCoordinator(ctx, func() error {
		resps, err := adm.CommitOffsets(ctx, group, os)
		if err == nil {
			err = resps.Error()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("durable: commit %s: %w", group, err)
	}
	return nil
}

// fetchDurable reads group's commits for topic. found is false when the
// group has committed nothing.
func fetchDurable(ctx context.Context, adm *kadm.Client, group, topic string) (cur cursor.Cursor, pcs map[int32]partCommit, found bool, err error) {
	var resps kadm.OffsetResponses
	err = cursor.RetryCoordinator(ctx, func() error {
		var err error
		resps, err = adm.FetchOffsetsForTopics(ctx, group, topic)
		if err == nil {
			err = resps.Error()
		}
		return err
	})
	if errors.Is(err, kerr.GroupIDNotFound) {
		return cur, nil, false, nil
	}
	if err != nil {
		return cur, nil, false, fmt.Errorf("durable: fetch offsets of %s: %w", group, err)
	}
	pcs = map[int32]partCommit{}
	for _, o := range resps[topic] {
		if o.At < 0 {
			continue
		}
		tag, parts, pc, ok := parseCommitMeta(o.Metadata, o.At)
		if ok {
			cur.Topic, cur.Partitions = tag, parts
		}
		pc.Partition = o.Partition
		pcs[o.Partition] = pc
		cur.Offsets = append(cur.Offsets, cursor.PartitionOffset{Partition: o.Partition, Offset: o.At})
	}
	sort.Slice(cur.Offsets, func(i, j int) bool { return cur.Offsets[i].Partition < cur.Offsets[j].Partition })
	if cur.Partitions == 0 && len(cur.Offsets) > 0 {
		cur.Partitions = cur.Offsets[len(cur.Offsets)-1].Partition + 1
	}
	return cur, pcs, len(cur.Offsets) > 0, nil
}

// Committed is the offset a durable subscription's group has committed on
// each partition of t's topic (partitions never committed are absent).
func (e *Cluster) Committed(ctx context.Context, t tenant.Tenant, group string) (map[int32]int64, error) {
	_, pcs, _, err := fetchDurable(ctx, e.adm, group, e.cfg.Naming.Events(t.String()))
	if err != nil {
		return nil, err
	}
	out := make(map[int32]int64, len(pcs))
	for p, pc := range pcs {
		out[p] = pc.Offset
	}
	return out, nil
}
