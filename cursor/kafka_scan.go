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
// concurrent scans. Plain record batches are read in place by a
// batchReader (no allocation per record); anything else is decoded by
// kgo.ProcessFetchPartition, so every format and codec kgo reads is
// supported.
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
// of records passed to fn. The record is fn's only during the call: the
// scan reuses it (and its Key, Value and header values point into the
// fetched batch), so fn copies what it keeps.
func (s *scanner) scan(ctx context.Context, st *TopicState, p int32, from, to int64, fn func(*kgo.Record) bool) (int, error) {
	n := 0
	br := batchReader{decomp: s.decomp}
	each := func(r *kgo.Record) bool {
		if r.Offset >= to {
			return false
		}
		n++
		return fn(r)
	}
	for from < to {
		rp, err := s.fetch(ctx, st, p, from)
		if err != nil {
			return n, err
		}
		var next int64
		var stopped bool
		if plainBatches(rp) {
			next, stopped, err = br.each(st.Topic, rp, from, each)
		} else {
			next, stopped, err = s.slow(st, rp, from, each)
		}
		if err != nil || stopped {
			return n, err
		}
		if next <= from {
			if rp.HighWatermark <= from {
				return n, nil // nothing more to read yet
			}
			return n, fmt.Errorf("%w at %s/%d@%d", errNoProgress, st.Topic, p, from)
		}
		from = next
	}
	return n, nil
}

// slow reads rp with kgo.ProcessFetchPartition: whatever batchReader
// leaves alone (errors, transactions, old message formats).
func (s *scanner) slow(st *TopicState, rp *kmsg.FetchResponseTopicPartition, from int64, fn func(*kgo.Record) bool) (next int64, stopped bool, err error) {
	fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		Offset:         from,
		IsolationLevel: kgo.ReadCommitted(),
		Topic:          st.Topic,
		Partition:      rp.Partition,
	}, rp, s.decomp, nil)
	if fp.Err != nil {
		return next, false, fmt.Errorf("cursor: fetch %s/%d@%d: %w", st.Topic, rp.Partition, from, fp.Err)
	}
	for _, r := range fp.Records {
		if r.Offset < from {
			continue
		}
		if !fn(r) {
			return next, true, nil
		}
	}
	return next, false, nil
}

// fetch sends one Fetch for p from off and returns p's part of the answer.
func (s *scanner) fetch(ctx context.Context, st *TopicState, p int32, off int64) (*kmsg.FetchResponseTopicPartition, error) {
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
		return nil, fmt.Errorf("cursor: fetch %s/%d@%d: %w", st.Topic, p, off, err)
	}
	fr := resp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(fr.ErrorCode); err != nil {
		return nil, fmt.Errorf("cursor: fetch %s/%d@%d: %w", st.Topic, p, off, err)
	}
	for i := range fr.Topics {
		for j := range fr.Topics[i].Partitions {
			if rp := &fr.Topics[i].Partitions[j]; rp.Partition == p {
				return rp, nil
			}
		}
	}
	return nil, fmt.Errorf("cursor: fetch %s/%d@%d: partition missing from response", st.Topic, p, off)
}
