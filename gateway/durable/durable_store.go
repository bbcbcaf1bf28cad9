package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
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
	// MaxAckPending caps delivered but unacknowledged events (0: the
	// default, DefaultMaxAckPending).
	MaxAckPending int `json:"max_ack_pending,omitempty"`
	// GraceMS > 0 marks the subscription of an ad-hoc at_least_once stream
	// (GET /aep/events): whichever node streams it moves ExpiresAt to now +
	// grace while it does, so it expires (and any node's janitor removes
	// it) a grace after its last stream ended, even if that node crashed.
	GraceMS int64 `json:"grace_ms,omitempty"`
}

// Expired says whether def has passed its expires_at at now.
func (def SubscriptionDef) Expired(now time.Time) bool {
	return def.ExpiresAt != nil && !now.Before(*def.ExpiresAt)
}

// SubscriptionGroup is the consumer group holding a durable subscription's
// committed offsets.
func SubscriptionGroup(t tenant.Tenant, id string) string { return "aep." + t.String() + ".sub." + id }

// PutSubscription writes def to the tenant's subscriptions topic.
func (e *Cluster) PutSubscription(ctx context.Context, t tenant.Tenant, def SubscriptionDef) error {
	b, err := json.Marshal(def)
	if err != nil {
		return err
	}
	return e.writeDef(ctx, t, def.ID, b)
}

// DeleteSubscription writes a tombstone for id and deletes its consumer
// group (a group that does not exist is fine).
func (e *Cluster) DeleteSubscription(ctx context.Context, t tenant.Tenant, id string) error {
	if err := e.writeDef(ctx, t, id, nil); err != nil {
		return err
	}
	_, _ = e.adm.DeleteGroups(ctx, SubscriptionGroup(t, id)) // best effort: an empty group expires by itself
	return nil
}

func (e *Cluster) writeDef(ctx context.Context, t tenant.Tenant, id string, value []byte) error {
	if err := e.ensure(ctx, t); err != nil {
		return err
	}
	rec := &kgo.Record{Topic: e.cfg.Naming.Subscriptions(t.String()), Key: []byte(id), Value: value}
	if err := e.admCl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("durable: write subscription %s: %w", id, err)
	}
	return nil
}

// Subscriptions returns every live definition of the tenant's
// subscriptions topic, by ID, as of its end offsets now: the node's
// follower of the topic (one consumer per tenant, started on first use)
// has read at least that far, so a create on any node is seen at once.
func (e *Cluster) Subscriptions(ctx context.Context, t tenant.Tenant) (map[string]SubscriptionDef, error) {
	f, err := e.defsFor(ctx, t)
	if err != nil {
		return nil, err
	}
	ends, err := e.endOffsets(ctx, f.topic)
	if err != nil {
		return nil, err
	}
	for _, ps := range ends {
		for p, lo := range ps {
			if err := f.prog.waitPast(ctx, p, lo.Offset); err != nil {
				return nil, fmt.Errorf("durable: read %s: %w", f.topic, err)
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]SubscriptionDef, len(f.defs))
	for id, def := range f.defs {
		out[id] = def
	}
	return out, nil
}

// defsFollower is this node's reader of one tenant's subscriptions topic.
type defsFollower struct {
	topic string
	prog  *readProgress
	mu    sync.Mutex
	defs  map[string]SubscriptionDef
	gone  map[string]bool // deleted: their groups are deleted by the janitor
}

func (e *Cluster) defsFor(ctx context.Context, t tenant.Tenant) (*defsFollower, error) {
	if err := e.ensure(ctx, t); err != nil {
		return nil, err
	}
	e.jmu.Lock()
	defer e.jmu.Unlock()
	if f := e.defs[t.String()]; f != nil {
		return f, nil
	}
	topic := e.cfg.Naming.Subscriptions(t.String())
	f := &defsFollower{topic: topic, prog: newReadProgress(), defs: map[string]SubscriptionDef{}, gone: map[string]bool{}}
	opts := append(append([]kgo.Opt(nil), e.cfg.ClientOpts...),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(time.Second))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("durable: subscriptions client: %w", err)
	}
	if !e.startGoroutines(2) {
		cl.Close()
		return nil, ErrClosed
	}
	e.defs[t.String()] = f
	go e.followDefs(t, f, cl)
	go e.janitor(t, f)
	return f, nil
}

// endDeleted ends the streams this node holds of deleted subscriptions
// (with ErrDeleted), whichever node took the DELETE.
func (e *Cluster) endDeleted(t tenant.Tenant, ids []string) {
	if len(ids) == 0 {
		return
	}
	e.jmu.Lock()
	js := e.journals[t.String()]
	e.jmu.Unlock()
	if js == nil {
		return
	}
	select {
	case <-js.ready:
	default:
		return // being set up: it holds no stream yet
	}
	j := js.j
	if j == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, id := range ids {
		for w := range j.watch[id] {
			if w.stream != nil {
				w.stream.end(ErrDeleted)
			}
		}
	}
}

// JanitorInterval is how often each node removes what expired and deleted
// subscriptions leave: an expired definition gets its tombstone, and the
// consumer group of every deleted one is deleted (the journal's records of
// them go with its retention).
var JanitorInterval = time.Minute

// maxGone bounds the deleted subscriptions waiting for the janitor.
const maxGone = 1 << 14

func (e *Cluster) janitor(t tenant.Tenant, f *defsFollower) {
	defer e.wg.Done()
	tk := time.NewTicker(JanitorInterval)
	defer tk.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-tk.C:
		}
		now := time.Now()
		var expired, gone []string
		f.mu.Lock()
		for id, def := range f.defs {
			if def.Expired(now) {
				expired = append(expired, id)
			}
		}
		for id := range f.gone {
			gone = append(gone, id)
		}
		f.mu.Unlock()
		ctx, cancel := context.WithTimeout(e.ctx, JanitorInterval/2)
		for _, id := range expired {
			if err := e.writeDef(ctx, t, id, nil); err != nil && ctx.Err() == nil {
				e.cfg.Logger.Warn().Err(err).Str("subscription", id).Msg("durable: tombstone of an expired subscription")
			}
		}
		if len(gone) > 0 {
			groups := make([]string, len(gone))
			for i, id := range gone {
				groups[i] = SubscriptionGroup(t, id)
			}
			resps, err := e.adm.DeleteGroups(ctx, groups...)
			if err == nil {
				f.mu.Lock()
				for _, r := range resps {
					if r.Err == nil || errors.Is(r.Err, kerr.GroupIDNotFound) {
						delete(f.gone, strings.TrimPrefix(r.Group, SubscriptionGroup(t, "")))
					}
				}
				f.mu.Unlock()
			}
		}
		cancel()
	}
}

func (e *Cluster) followDefs(t tenant.Tenant, f *defsFollower, cl *kgo.Client) {
	defer e.wg.Done()
	defer cl.Close()
	for {
		fs := cl.PollFetches(e.ctx)
		if e.ctx.Err() != nil || fs.IsClientClosed() {
			f.prog.set(nil, ErrClosed)
			return
		}
		next := map[int32]int64{}
		var deleted []string
		f.mu.Lock()
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			next[r.Partition] = r.Offset + 1
			if r.Value == nil {
				if _, ok := f.defs[string(r.Key)]; ok {
					deleted = append(deleted, string(r.Key))
					if len(f.gone) < maxGone {
						f.gone[string(r.Key)] = true
					}
				}
				delete(f.defs, string(r.Key))
				continue
			}
			var def SubscriptionDef
			if json.Unmarshal(r.Value, &def) != nil || def.ID != string(r.Key) {
				e.metrics.journalSkipped("subscriptions")
				e.cfg.Logger.Warn().Str("topic", f.topic).Int64("offset", r.Offset).Msg("durable: unreadable subscription definition skipped")
				continue
			}
			f.defs[def.ID] = def
		}
		f.mu.Unlock()
		f.prog.set(next, nil)
		e.endDeleted(t, deleted)
	}
}

// DeleteGroup deletes a durable stream's consumer group (its committed
// offsets), best effort: a group that does not exist is fine, and an empty
// group the broker could not delete expires by itself.
func (e *Cluster) DeleteGroup(ctx context.Context, group string) {
	_, _ = e.adm.DeleteGroups(ctx, group)
}
