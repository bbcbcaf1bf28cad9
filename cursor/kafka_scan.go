package cursor

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// scanner reads a stretch of one partition with plain Fetch requests sent
// through a shared client: no consumer state, no goroutine, any number of
// concurrent scans. Records are decoded by kgo.ProcessFetchPartition, so
// every compression codec kgo reads is supported.
type scanner struct {
	cl       *kgo.Client
	decomp   kgo.Decompressor
	maxBytes int32
}

func newScanner(cl *kgo.Client, maxBytes int32) *scanner {
	if maxBytes <= 0 {
		maxBytes = 1 << 20
	}
	return &scanner{cl: cl, decomp: kgo.DefaultDecompressor(), maxBytes: maxBytes}
}

var errNoProgress = errors.New("cursor: fetch made no progress")

// scan calls fn on each record of st.Topic/p with an offset in [from, to),
// in order, until fn returns false or to is reached. It returns the number
// of records passed to fn.
func (s *scanner) scan(ctx context.Context, st *TopicState, p int32, from, to int64, fn func(*kgo.Record) bool) (int, error) {
	n := 0
	for from < to {
		fp, next, err := s.fetch(ctx, st, p, from)
		if err != nil {
			return n, err
		}
		for _, r := range fp.Records {
			if r.Offset < from {
				continue
			}
			if r.Offset >= to {
				return n, nil
			}
			n++
			if !fn(r) {
				return n, nil
			}
		}
		if next <= from {
			if fp.HighWatermark <= from {
				return n, nil // nothing more to read yet
			}
			return n, fmt.Errorf("%w at %s/%d@%d", errNoProgress, st.Topic, p, from)
		}
		from = next
	}
	return n, nil
}

func (s *scanner) fetch(ctx context.Context, st *TopicState, p int32, off int64) (kgo.FetchPartition, int64, error) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 0
	req.MinBytes = 1
	req.MaxBytes = s.maxBytes
	req.IsolationLevel = 1 // read committed
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = st.Topic
	rt.TopicID = st.ID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = p
	rp.FetchOffset = off
	rp.CurrentLeaderEpoch = -1
	rp.LogStartOffset = -1
	rp.PartitionMaxBytes = s.maxBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)

	var (
		resp kmsg.Response
		err  error
	)
	if leader := st.Leaders[p]; leader >= 0 {
		resp, err = s.cl.Broker(int(leader)).Request(ctx, req)
	} else {
		resp, err = s.cl.Request(ctx, req)
	}
	if err != nil {
		return kgo.FetchPartition{}, 0, fmt.Errorf("cursor: fetch %s/%d@%d: %w", st.Topic, p, off, err)
	}
	fr := resp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(fr.ErrorCode); err != nil {
		return kgo.FetchPartition{}, 0, fmt.Errorf("cursor: fetch %s/%d@%d: %w", st.Topic, p, off, err)
	}
	for i := range fr.Topics {
		for j := range fr.Topics[i].Partitions {
			rp := &fr.Topics[i].Partitions[j]
			if rp.Partition != p {
				continue
			}
			fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
				Offset:         off,
				IsolationLevel: kgo.ReadCommitted(),
				Topic:          st.Topic,
				Partition:      p,
			}, rp, s.decomp, nil)
			if fp.Err != nil {
				return fp, next, fmt.Errorf("cursor: fetch %s/%d@%d: %w", st.Topic, p, off, fp.Err)
			}
			return fp, next, nil
		}
	}
	return kgo.FetchPartition{}, 0, fmt.Errorf("cursor: fetch %s/%d@%d: partition missing from response", st.Topic, p, off)
}
