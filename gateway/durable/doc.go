// Package durable is the gateway's durable cluster: it serves durable
// at_least_once subscriptions (docs/delivery-durable-d.md,
// docs/durable-cluster.md) on top of the delivery engine (gateway/engine),
// coordinating the nodes through Kafka only.
//
// What it owns: a Cluster (New) holds, per node, the tenants' subscription
// journal followers (durable_journal.go), the followers and janitors of the
// compacted subscriptions topics (durable_store.go), the open DurableStreams
// (durable_stream.go, durable_lease.go), the committed-offset encoding
// (durable_commit.go), the dead-letter writes and reads
// (durable_deadletter.go, deadletter_read.go), its own admin client, and
// the durable metrics (aep_delivery_durable_streams,
// aep_delivery_redeliveries_total, aep_delivery_dead_letters_total,
// aep_delivery_remote_ack_seconds, the journal counters, and the lag
// collector's aep_delivery_*_lag_records). Of the engine it uses only what
// its Engine interface lists (*engine.Engine satisfies it): topic state and
// creation, reader client options, queue limits, the shared delivery
// counter and tenant label cap, the tails' positions, and refusals. The
// engine never imports this package.
//
// A DurableStream (OpenDurable) serves one durable at_least_once
// subscription on its own client from its consumer group's committed
// offsets, tracks delivered offsets in a cursor.AckTracker (its window
// bounds memory: a full partition is paused; MaxAckPending bounds its
// delivered and unacknowledged events), redelivers unacknowledged events
// after the ack timeout and backoff (with the later unacknowledged events
// of the same session, in order), dead-letters rejected events and those
// handed to a client max_attempts times without an ack (the transports
// confirm what they wrote through DurableStream.Handed; see
// docs/durable-cluster.md for when a hand-over counts) to the tenant's
// dead-letter topic, and checkpoints its state in the subscription journal
// and the committable offsets in the group. Definitions live in the
// tenant's compacted subscriptions topic; gateway/dialectd serves the API.
//
// Durable streams across nodes: per tenant one journal follower owns two
// goroutines, the reader and the lease renewals, stopped and waited for
// when the Cluster closes or when the follower retires after JournalIdle
// without use; its setup runs on a goroutine of its own off Cluster.jmu. A
// stream hands a delivery out only while it holds its lease and was not
// fenced: the check runs before each reservation, at each turn of the
// stream's loop, and in Hand, which the bindings call right before writing
// each delivery.
//
// Concurrency: Cluster and DurableStream are safe for concurrent use. Every
// goroutine the Cluster starts (streams, journal followers and renewals,
// definitions followers and janitors) is counted in its WaitGroup and
// stopped and waited for by Cluster.Close, which is idempotent; close the
// Cluster before the engine it runs on. A DurableStream owns one goroutine
// (stopped and waited for by Close and Cluster.Close) that is the only
// sender on its queue; Ack, Reject, Handed and Stats are safe from any
// goroutine (they take the stream's mutex and interrupt its poll).
//
// Lock order (a lock may be taken while holding the ones before it, never
// the other way round):
//
//	Cluster.jmu → journal.mu → DurableStream.mu → queue (internal/queue)
//	Cluster.jmu → Cluster.goMu
//	defsFollower.mu, readProgress.mu, lagCollector.mu: leaves, held with
//	no other lock of this package
//
// journal.mu is held while a record is dispatched: fencing a stream and
// applying acks take DurableStream.mu under it, so no code may take
// journal.mu while holding DurableStream.mu (the stream reads its lease
// from an atomic for that reason). Cluster.jmu is held only around map
// lookups and a journal's retirement, never across Kafka requests, and
// never with a DurableStream.mu. No lock of this package is held while
// calling the Engine (whose own locks, Engine.mu and tail.mu, it takes
// inside TailPositions), and the Engine never calls back into it.
package durable
