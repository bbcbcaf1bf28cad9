package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaSender produces batches straight to a topic: the baseline that shows
// what the broker alone costs on this machine. The producer settings mirror
// gateway.NewProducerOpts (acks=all, idempotent, which franz-go enables by
// default, sticky key partitioner, lz4, no linger), and records are keyed by session
// as the gateway keys them; no headers and no validation.
type kafkaSender struct {
	cl    *kgo.Client
	topic string
}

func newKafkaSender(ctx context.Context, cfg BenchConfig) (*kafkaSender, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(cfg.BaselineBrokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.ProducerBatchMaxBytes(1_000_000),
		kgo.ProducerBatchCompression(kgo.Lz4Compression(), kgo.NoCompression()),
		kgo.RecordDeliveryTimeout(cfg.RequestTimeout),
		kgo.ProducerLinger(0), // as the gateway's producer (franz-go's default is 10ms)
	)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	resp, err := adm.CreateTopic(ctx, int32(cfg.BaselinePartitions), -1, nil, cfg.BaselineTopic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		cl.Close()
		return nil, fmt.Errorf("create topic %s: %w", cfg.BaselineTopic, err)
	}
	return &kafkaSender{cl: cl, topic: cfg.BaselineTopic}, nil
}

func (k *kafkaSender) close() { k.cl.Close() }

func (k *kafkaSender) send(ctx context.Context, b *loadBatch) outcome {
	recs := make([]*kgo.Record, len(b.lines))
	for i, l := range b.lines {
		recs[i] = &kgo.Record{Topic: k.topic, Key: []byte(b.keys[i]), Value: l}
		if b.hdrs != nil {
			recs[i].Headers = b.hdrs[i]
		}
	}
	var o outcome
	var firstErr error
	for _, r := range k.cl.ProduceSync(ctx, recs...) {
		if r.Err != nil {
			o.failed++
			firstErr = cmpOr(firstErr, r.Err)
		} else {
			o.accepted++
		}
	}
	o.status = "ok"
	if firstErr != nil {
		o.status = "kafka: " + trimErr(firstErr)
	}
	return o
}

// routedSender is the kafkaSender of the routed baseline: its batches
// carry the gateway's routing headers (runPhase generates them for it).
type routedSender struct{ *kafkaSender }

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// trimErr keeps status keys short and few.
func trimErr(err error) string {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline exceeded"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	s := err.Error()
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}
