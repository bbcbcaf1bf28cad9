package forward

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/aep-gateway/aep-gateway/partitioning"
)

// Topics names and sizes the two topics of the workers mode.
type Topics struct {
	// Registry and Delivery are the topic names; zero means the defaults.
	Registry, Delivery string
	// DeliveryPartitions is the delivery topic's partition count, set at
	// creation (nodes map to partitions by hash: changing it later moves
	// nodes, so restart nodes and workers together). Zero means 12.
	DeliveryPartitions int32
	// DeliveryRetention bounds how long forwarded records are kept; a
	// node reads them within moments. Zero means one hour.
	DeliveryRetention time.Duration
	// ReplicationFactor of both; zero or -1 means the broker's default.
	ReplicationFactor int16
}

// WithDefaults fills the zero fields.
func (t Topics) WithDefaults() Topics {
	if t.Registry == "" {
		t.Registry = DefaultRegistryTopic
	}
	if t.Delivery == "" {
		t.Delivery = DefaultDeliveryTopic
	}
	if t.DeliveryPartitions <= 0 {
		t.DeliveryPartitions = 12
	}
	if t.DeliveryRetention <= 0 {
		t.DeliveryRetention = time.Hour
	}
	if t.ReplicationFactor == 0 {
		t.ReplicationFactor = -1
	}
	return t
}

// Ensure creates the registry topic (one partition, compacted: every
// worker reads it whole, in order) and the delivery topic, when missing.
// Its error names the topic and the cause (partitioning.ExplainCreate).
func (t Topics) Ensure(ctx context.Context, adm *kadm.Client) error {
	t = t.WithDefaults()
	compact, del := "compact", "delete"
	ret := strconv.FormatInt(t.DeliveryRetention.Milliseconds(), 10)
	specs := []struct {
		name  string
		parts int32
		cfg   map[string]*string
	}{
		{t.Registry, 1, map[string]*string{"cleanup.policy": &compact}},
		{t.Delivery, t.DeliveryPartitions, map[string]*string{"cleanup.policy": &del, "retention.ms": &ret}},
	}
	for _, s := range specs {
		resp, err := adm.CreateTopic(ctx, s.parts, t.ReplicationFactor, s.cfg, s.name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", s.name, partitioning.ExplainCreate(err, t.ReplicationFactor, resp.ErrMessage))
		}
	}
	// A topic just created takes a moment to be served by its leaders.
	for attempt := 0; ; attempt++ {
		ends, err := adm.ListEndOffsets(ctx, t.Registry, t.Delivery)
		if err == nil {
			err = ends.Error()
		}
		if err == nil || attempt == 100 {
			if err != nil {
				return fmt.Errorf("topics %s, %s: %w", t.Registry, t.Delivery, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics %s, %s: %w (%w)", t.Registry, t.Delivery, err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
