// Package engine is the gateway's dialect-neutral delivery engine: it reads
// the tenant event topics and hands every event to the subscriptions whose
// filter matches it. It knows records, routing attributes (aep.Attrs),
// compiled filters and Kafka positions; it never builds a wire message: the
// bindings (gateway/dialectd, gateway/dialectr) turn deliveries into their
// dialect's messages and pass in what is dialect-specific (the dead-letter
// record's encoding, DeadLetterCodec).
//
// Per tenant topic and node there is one shared tail reader (a tail): a
// franz-go client that consumes every partition from the end, decodes the
// routing headers of each record once, asks the tenant's filtering.Index which
// subscriptions match, and offers the record (shared, never copied per
// subscriber) to each one's bounded queue. A subscription that starts from a
// position reads on its own catch-up client until it stands at or past the
// tail's position on every partition, then joins the tail under the tail's
// lock with a per-partition guard (deliver only offsets >= guard), so the seam
// has neither a gap nor a duplicate. docs/delivery.md explains the handover.
//
// With Config.LiveDelivery LiveWorkers (docs/scaling.md) a tail has no
// Kafka client: the node's feed (one client on the node's partition of the
// delivery topic) hands it the records the filter workers forwarded, listing
// the matching subscriptions; the tail's position is then the next source
// offset forwarded per partition, and a record below it is a copy forwarded
// twice (a replaced worker) and dropped. Every subscription, live ones too,
// is registered in the registry topic and starts as a catch-up that joins
// once it stands at or past the workers' markers (their position when they
// took the registration) and the tail's position; until the markers come
// (a live subscription after Forward.MarkerWait, a resume at once) it
// reads its topic itself, and a resume's catch-up sends its caught-up
// marker once it has read to the topic's end, without waiting for them.
// Registry writes are retried until they land (feed_registry.go).
//
// Slow subscribers: the tail never blocks on a queue. A lossy (best_effort)
// subscription whose queue is full loses the event, which still consumes a
// delivery sequence number, so the gap is visible. A lossless subscription
// whose queue is full leaves the tail and goes back to catch-up reading from
// the event it could not take, then joins the tail again: it loses nothing
// and slows nobody but itself.
//
// At-least-once (durable) subscriptions are served by gateway/durable on
// top of the Engine: cluster_api.go is what it uses of it.
//
// Concurrency: Engine and Subscription are safe for concurrent use. Each tail
// owns one goroutine, stopped and waited for when its last subscription
// leaves or the Engine closes; each catch-up owns one goroutine, stopped and
// waited for by Subscription.Close and Engine.Close. A Subscription's queue
// (Deliveries, an internal/queue.Queue allocated as it fills) has exactly one
// sender at a time (a catch-up or the tail) and is ended exactly once, after
// the last sender is gone.
//
// Lock order (a lock may be taken while holding the ones before it, never
// the other way round):
//
//	Engine.mu → tail.mu → Subscription.mu → Engine.goMu
package engine
