package partitioning

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// EnsureMirror creates topic dst with as many partitions as src (a
// tenant's audit or CloudEvents topic beside its events topic, written
// partition for partition), with configs, or adds the partitions dst lacks;
// it waits until metadata shows them. rf -1 is the broker's default. It
// asks the brokers each time: kadm's topic listing answers from the
// client's metadata cache (MetadataMinAge, 5 s by default), which keeps
// saying "no such topic" for a while after the topic was created.
func EnsureMirror(ctx context.Context, cl *kgo.Client, src, dst string, rf int16, configs map[string]*string) error {
	want, err := partitionsOf(ctx, cl, src)
	if err != nil {
		return err
	}
	if want == 0 {
		return fmt.Errorf("metadata of %s: no such topic", src)
	}
	have, err := partitionsOf(ctx, cl, dst)
	if err != nil {
		return err
	}
	adm := kadm.NewClient(cl)
	switch {
	case have >= want:
		return nil
	case have > 0:
		if _, err := adm.CreatePartitions(ctx, int(want-have), dst); err != nil && !errors.Is(err, kerr.InvalidPartitions) {
			return fmt.Errorf("grow %s to %d partitions: %w", dst, want, err)
		}
	default:
		resp, err := adm.CreateTopic(ctx, want, rf, configs, dst)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create %s: %w", dst, err)
		}
	}
	for range 100 { // a new topic or partition takes a moment to show
		if have, err := partitionsOf(ctx, cl, dst); err == nil && have >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s does not show %d partitions in metadata", dst, want)
}

// partitionsOf is the number of partitions of topic the brokers report
// now (0: no such topic).
func partitionsOf(ctx context.Context, cl *kgo.Client, topic string) (int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	for _, rt := range resp.Topics {
		if rt.Topic == nil || *rt.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				return 0, nil
			}
			return 0, fmt.Errorf("metadata of %s: %w", topic, err)
		}
		return int32(len(rt.Partitions)), nil
	}
	return 0, nil
}
