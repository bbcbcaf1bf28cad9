package engine

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// This file is what the durable cluster (gateway/durable) uses of the
// Engine: its Engine interface lists these methods with State and NodeID.

// EnsureTopics creates the tenant's topics on first use, when Config.Topics
// is set.
func (e *Engine) EnsureTopics(ctx context.Context, t tenant.Tenant) error { return e.ensure(ctx, t) }

// ReaderOpts are the client options of a subscription's own reader of
// topic from offs (see readerOpts).
func (e *Engine) ReaderOpts(topic string, offs map[int32]kgo.Offset) []kgo.Opt {
	return e.readerOpts(topic, offs)
}

// ReaderFetchBytes is Config.ReaderFetchBytes, the default filled: about
// what one fetch of a reader decodes to (internal/fetchsize).
func (e *Engine) ReaderFetchBytes() int32 { return e.cfg.ReaderFetchBytes }

// QueueLimits returns Config.Queue and Config.MaxQueue, defaults filled.
func (e *Engine) QueueLimits() (queue, maxQueue int) { return e.cfg.Queue, e.cfg.MaxQueue }

// CountDelivered counts one event queued to a subscriber
// (aep_delivery_events_total).
func (e *Engine) CountDelivered() { e.metrics.delivered.Inc() }

// TenantLabel is the tenant label of per-tenant metrics, under the cap of
// Config.MetricsMaxTenants.
func (e *Engine) TenantLabel(t string) string { return e.metrics.tenants.label(t) }

// TailPosition is how far this node's shared tail of a tenant topic has
// dispatched: the next offset per partition.
type TailPosition struct {
	Tenant, Topic string
	Pos           []int64
}

// TailPositions copies the positions of the running tails.
// Lock order: Engine.mu, then tail.mu (as Engine.Close).
func (e *Engine) TailPositions() []TailPosition {
	var out []TailPosition
	e.mu.Lock()
	defer e.mu.Unlock()
	for topic, t := range e.tails {
		t.mu.Lock()
		out = append(out, TailPosition{Tenant: t.tenant, Topic: topic, Pos: append([]int64(nil), t.pos...)})
		t.mu.Unlock()
	}
	return out
}
