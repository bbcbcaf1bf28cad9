package engine

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Bounds of the registry writer's retries.
const (
	registryBackoffMin = 100 * time.Millisecond
	registryBackoffMax = 5 * time.Second
	// registryWriteTimeout bounds one attempt, so a broker that does not
	// answer costs a retry, not the writer.
	registryWriteTimeout = 10 * time.Second
	// registryBatch is the most entries one attempt writes.
	registryBatch = 256
)

// registryWriter writes the node's subscription entries (and their
// tombstones) to the registry topic, retrying each failed write with a
// bounded backoff until it lands or the feed stops: a registration lost
// would leave its subscription reading its topic itself for good (the
// workers never answer it), an unregistration lost would keep the workers
// forwarding for a subscription that is gone. Pending writes are held by
// key, a later write of a key replacing one not yet written, so the set is
// bounded by the node's subscriptions; keys are written in the order they
// were first queued, and one key's writes in the order they were queued.
// Its goroutine (run) is owned by the feed, which stops and waits for it.
type registryWriter struct {
	f    *feed
	wake chan struct{} // capacity 1: something was queued

	mu      sync.Mutex
	pending map[string]pendingWrite // by key; guarded by mu
	order   []string                // pending keys, first queued first; guarded by mu
	gen     uint64                  // guarded by mu
}

type pendingWrite struct {
	value []byte // nil: tombstone
	gen   uint64 // which queued write of the key this is
}

func newRegistryWriter(f *feed) *registryWriter {
	return &registryWriter{f: f, wake: make(chan struct{}, 1), pending: map[string]pendingWrite{}}
}

// queue queues a write of key (a nil value tombstones it). It never blocks.
func (w *registryWriter) queue(key string, value []byte) {
	w.mu.Lock()
	w.gen++
	if _, ok := w.pending[key]; !ok {
		w.order = append(w.order, key)
	}
	w.pending[key] = pendingWrite{value: value, gen: w.gen}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// batch returns up to registryBatch pending writes as records, oldest
// first, and the generation of each.
func (w *registryWriter) batch() ([]*kgo.Record, []uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := min(len(w.order), registryBatch)
	rs, gens := make([]*kgo.Record, 0, n), make([]uint64, 0, n)
	for _, k := range w.order[:n] {
		p := w.pending[k]
		rs = append(rs, &kgo.Record{Topic: w.f.cfg.RegistryTopic, Key: []byte(k), Value: p.value})
		gens = append(gens, p.gen)
	}
	return rs, gens
}

// landed drops the writes that landed, unless the key was queued again
// meanwhile.
func (w *registryWriter) landed(res kgo.ProduceResults, gens []uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, r := range res {
		k := string(r.Record.Key)
		if r.Err == nil && w.pending[k].gen == gens[i] {
			delete(w.pending, k)
		}
	}
	kept := w.order[:0]
	for _, k := range w.order {
		if _, ok := w.pending[k]; ok {
			kept = append(kept, k)
		}
	}
	clear(w.order[len(kept):])
	w.order = kept
}

// run writes what is queued until ctx ends; a failed attempt is counted,
// logged and retried after a backoff that doubles up to
// registryBackoffMax.
func (w *registryWriter) run(ctx context.Context) {
	defer w.f.wg.Done()
	backoff, failures := registryBackoffMin, 0
	for {
		rs, gens := w.batch()
		if len(rs) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
			}
			continue
		}
		actx, cancel := context.WithTimeout(ctx, registryWriteTimeout)
		res := w.f.e.admCl.ProduceSync(actx, rs...)
		cancel()
		w.landed(res, gens)
		err := res.FirstErr()
		if err == nil {
			if failures > 0 {
				w.f.e.cfg.Logger.Info().Int("failed_attempts", failures).Msg("engine: registry writes land again")
			}
			backoff, failures = registryBackoffMin, 0
			continue
		}
		if ctx.Err() != nil {
			return // stopping: the lease tombstone ends every entry
		}
		failures++
		w.f.e.metrics.regFailures.Inc()
		w.f.e.cfg.Logger.Warn().Err(err).Str("topic", w.f.cfg.RegistryTopic).Int("attempt", failures).
			Dur("retry_in", backoff).Msg("engine: registry write failed; retrying")
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, registryBackoffMax)
	}
}
