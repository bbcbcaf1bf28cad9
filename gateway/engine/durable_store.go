package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// SubscriptionDef is a durable subscription as stored (JSON, keyed by ID)
// in the tenant's compacted subscriptions topic; a tombstone deletes it.
type SubscriptionDef struct {
	ID           string          `json:"subscription_id"`
	Filter       json.RawMessage `json:"filter"` // normalized filter (filtering's canonical JSON)
	DeliveryMode string          `json:"delivery_mode"`
	CreatedAt    time.Time       `json:"created_at"`
	ExpiresAt    *time.Time      `json:"expires_at"`
	AckTimeoutMS int64           `json:"ack_timeout_ms,omitempty"`
	MaxAttempts  int             `json:"max_attempts,omitempty"`
}

// Expired says whether def has passed its expires_at at now.
func (def SubscriptionDef) Expired(now time.Time) bool {
	return def.ExpiresAt != nil && !now.Before(*def.ExpiresAt)
}

// SubscriptionGroup is the consumer group holding a durable subscription's
// committed offsets.
func SubscriptionGroup(t tenant.Tenant, id string) string { return "aep." + t.String() + ".sub." + id }

// PutSubscription writes def to the tenant's subscriptions topic.
func (e *Engine) PutSubscription(ctx context.Context, t tenant.Tenant, def SubscriptionDef) error {
	b, err := json.Marshal(def)
	if err != nil {
		return err
	}
	return e.writeDef(ctx, t, def.ID, b)
}

// DeleteSubscription writes a tombstone for id and deletes its consumer
// group (a group that does not exist is fine).
func (e *Engine) DeleteSubscription(ctx context.Context, t tenant.Tenant, id string) error {
	if err := e.writeDef(ctx, t, id, nil); err != nil {
		return err
	}
	_, _ = e.adm.DeleteGroups(ctx, SubscriptionGroup(t, id)) // best effort: an empty group expires by itself
	return nil
}

func (e *Engine) writeDef(ctx context.Context, t tenant.Tenant, id string, value []byte) error {
	if err := e.ensure(ctx, t); err != nil {
		return err
	}
	rec := &kgo.Record{Topic: e.cfg.Naming.Subscriptions(t.String()), Key: []byte(id), Value: value}
	if err := e.admCl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("engine: write subscription %s: %w", id, err)
	}
	return nil
}

// Subscriptions reads every live definition of the tenant's subscriptions
// topic (from its start to the end offsets listed first), by ID.
func (e *Engine) Subscriptions(ctx context.Context, t tenant.Tenant) (map[string]SubscriptionDef, error) {
	if err := e.ensure(ctx, t); err != nil {
		return nil, err
	}
	topic := e.cfg.Naming.Subscriptions(t.String())
	ends, err := e.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("engine: end offsets of %s: %w", topic, err)
	}
	starts, err := e.adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("engine: start offsets of %s: %w", topic, err)
	}
	want := map[int32]int64{}
	offs := map[int32]kgo.Offset{}
	for p, lo := range ends[topic] {
		if so, ok := starts.Lookup(topic, p); ok && lo.Offset > so.Offset {
			want[p] = lo.Offset
			offs[p] = kgo.NewOffset().At(so.Offset)
		}
	}
	defs := map[string]SubscriptionDef{}
	if len(want) == 0 {
		return defs, nil
	}
	opts := append(append([]kgo.Opt(nil), e.cfg.ClientOpts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offs}))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("engine: subscriptions client: %w", err)
	}
	defer cl.Close()
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("engine: read %s: %w", topic, err)
		}
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			if r.Offset+1 >= want[r.Partition] {
				delete(want, r.Partition)
			}
			if r.Value == nil {
				delete(defs, string(r.Key))
				continue
			}
			var def SubscriptionDef
			if json.Unmarshal(r.Value, &def) != nil || def.ID != string(r.Key) {
				e.cfg.Logger.Warn().Str("topic", topic).Int64("offset", r.Offset).Msg("engine: unreadable subscription definition skipped")
				continue
			}
			defs[def.ID] = def
		}
	}
	return defs, nil
}

// DeleteGroup deletes a durable stream's consumer group (its committed
// offsets), best effort: a group that does not exist is fine, and an empty
// group the broker could not delete expires by itself.
func (e *Engine) DeleteGroup(ctx context.Context, group string) {
	_, _ = e.adm.DeleteGroups(ctx, group)
}
