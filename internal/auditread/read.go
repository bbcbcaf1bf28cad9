// Package auditread reads what an audit verification needs from Kafka: a
// tenant's events topic (each record's offset and content hash, never its
// bytes kept) and audit topic (its checkpoints), every partition from its
// log start to the end offset listed when the read began. It writes and
// reads exports (Export), so an auditor verifies without cluster access.
package auditread

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/internal/auditlog"
)

// Topics names what is read.
type Topics struct {
	Events, Audit string
}

// Visitor sees what Read reads, in offset order per partition (an export
// writes it down); nil fields see nothing.
type Visitor struct {
	Event func(partition int32, offset int64, rec auditlog.Record)
	Audit func(partition int32, offset int64, value []byte)
}

// Read reads both topics with the client options opts.
func Read(ctx context.Context, opts []kgo.Opt, t Topics, visit Visitor) ([]auditlog.PartitionInput, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	evStart, evEnd, err := bounds(ctx, adm, t.Events)
	if err != nil {
		return nil, err
	}
	auStart, auEnd, err := bounds(ctx, adm, t.Audit)
	if err != nil && !errors.Is(err, errNoTopic) {
		return nil, err
	}
	parts := map[int32]*auditlog.PartitionInput{}
	for p := range evEnd {
		parts[p] = &auditlog.PartitionInput{Partition: p, LogStart: evStart[p], LogEnd: evEnd[p], AuditStart: auStart[p]}
	}
	err = scan(ctx, opts, t.Events, evStart, evEnd, func(r *kgo.Record) {
		rec := RecordOf(r)
		in := parts[r.Partition]
		in.Records = append(in.Records, auditlog.Logged{Offset: r.Offset, Content: auditlog.ContentHash(rec)})
		if visit.Event != nil {
			visit.Event(r.Partition, r.Offset, rec)
		}
	})
	if err != nil {
		return nil, err
	}
	err = scan(ctx, opts, t.Audit, auStart, auEnd, func(r *kgo.Record) {
		in := parts[r.Partition]
		if in == nil { // an audit partition beyond the events topic's: report it on its own
			in = &auditlog.PartitionInput{Partition: r.Partition}
			parts[r.Partition] = in
		}
		if visit.Audit != nil {
			visit.Audit(r.Partition, r.Offset, r.Value)
		}
		cp, err := auditlog.ParseCheckpoint(r.Value)
		in.Checkpoints = append(in.Checkpoints, auditlog.Stored{AuditOffset: r.Offset, Checkpoint: cp, Err: err})
	})
	if err != nil {
		return nil, err
	}
	out := make([]auditlog.PartitionInput, 0, len(parts))
	for _, in := range parts {
		out = append(out, *in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out, nil
}

// RecordOf is what is sealed of r.
func RecordOf(r *kgo.Record) auditlog.Record {
	hs := make([]auditlog.Header, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = auditlog.Header{Key: []byte(h.Key), Value: h.Value}
	}
	return auditlog.Record{Key: r.Key, Value: r.Value, Headers: hs, TimestampMs: r.Timestamp.UnixMilli()}
}

var errNoTopic = errors.New("auditread: no such topic")

// bounds lists the start and end offset of every partition of topic.
func bounds(ctx context.Context, adm *kadm.Client, topic string) (start, end map[int32]int64, err error) {
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return nil, nil, fmt.Errorf("auditread: metadata of %s: %w", topic, err)
	}
	if d, ok := td[topic]; !ok || d.Err != nil {
		return nil, nil, fmt.Errorf("%w: %s", errNoTopic, topic)
	}
	ss, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = ss.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("auditread: start offsets of %s: %w", topic, err)
	}
	es, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = es.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("auditread: end offsets of %s: %w", topic, err)
	}
	start, end = map[int32]int64{}, map[int32]int64{}
	ss.Each(func(o kadm.ListedOffset) { start[o.Partition] = o.Offset })
	es.Each(func(o kadm.ListedOffset) { end[o.Partition] = o.Offset })
	return start, end, nil
}

// scan reads every partition of topic from start to end.
func scan(ctx context.Context, opts []kgo.Opt, topic string, start, end map[int32]int64, each func(*kgo.Record)) error {
	at := map[int32]kgo.Offset{}
	left := 0
	for p, e := range end {
		if e > start[p] {
			at[p] = kgo.NewOffset().At(start[p])
			left++
		}
	}
	if left == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: at}))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	done := map[int32]bool{}
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) { ferr = fmt.Errorf("auditread: %s partition %d: %w", topic, p, err) })
		if ferr != nil {
			return ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if done[r.Partition] || r.Offset >= end[r.Partition] {
				return
			}
			each(r)
			if r.Offset == end[r.Partition]-1 {
				done[r.Partition] = true
				left--
			}
		})
	}
	return nil
}
