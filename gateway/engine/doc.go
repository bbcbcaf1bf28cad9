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
// At-least-once (docs/delivery-durable-d.md): a DurableStream (OpenDurable)
// serves one durable at_least_once subscription on its own
// client from its consumer group's committed offsets, tracks delivered
// offsets in a cursor.AckTracker (its window bounds memory: a full partition
// is paused; MaxAckPending bounds its delivered and unacknowledged events),
// redelivers unacknowledged events after the ack timeout and backoff (with
// the later unacknowledged events of the same session, in order),
// dead-letters rejected events and those handed to a client max_attempts
// times without an ack (the transports confirm what they wrote through
// DurableStream.Handed; see docs/durable-cluster.md for when a hand-over
// counts) to the tenant's dead-letter topic, and checkpoints its state in
// the subscription journal and the committable offsets in the group. SubscriptionsHandlerD serves the
// durable subscriptions API (/aep/subscriptions); definitions live in the
// tenant's compacted subscriptions topic.
//
// Concurrency: Engine and Subscription are safe for concurrent use. Each tail
// owns one goroutine, stopped and waited for when its last subscription
// leaves or the Engine closes; each catch-up owns one goroutine, stopped and
// waited for by Subscription.Close and Engine.Close. A Subscription's queue
// (Deliveries, an internal/queue.Queue allocated as it fills) has exactly one
// sender at a time (a catch-up or the tail) and is ended exactly once, after
// the last sender is gone. A DurableStream owns one goroutine (stopped and
// waited for by Close and Engine.Close) that is the only sender on its
// queue; Ack, Reject, Handed and Stats are safe from any goroutine (they
// take the stream's mutex and interrupt its poll).
//
// Durable streams across nodes (docs/durable-cluster.md): per tenant one
// journal follower (durable_journal.go) owns two goroutines, the reader
// and the lease renewals, stopped and waited for when the Engine closes or
// when the follower retires after JournalIdle without use; its setup runs
// on a goroutine of its own off Engine.jmu. A stream hands a delivery out
// only while it holds its lease and was not fenced: the check runs before
// each reservation, at each turn of the stream's loop, and in Hand, which
// the bindings call right before writing each delivery.
//
// Lock order (a lock may be taken while holding the ones before it, never
// the other way round):
//
//	Engine.mu → tail.mu → Subscription.mu → Engine.goMu
//	Engine.jmu → journal.mu → DurableStream.mu → queue (internal/queue)
//	defsFollower.mu, readProgress.mu: leaves, held with no other lock
//
// journal.mu is held while a record is dispatched: fencing a stream and
// applying acks take DurableStream.mu under it, so no code may take
// journal.mu while holding DurableStream.mu (the stream reads its lease
// from an atomic for that reason). Engine.jmu is held only around map
// lookups and a journal's retirement, never across Kafka requests, and
// never with Engine.mu or a DurableStream.mu.
package engine
