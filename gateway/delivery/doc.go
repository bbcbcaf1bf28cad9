// Package delivery is the gateway's delivery engine: it reads the tenant event
// topics and hands every event to the live subscriptions whose filter matches
// it, and it serves dialect D's SSE event stream (GET /aep/events) on top.
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
// Slow subscribers: the tail never blocks on a queue. A lossy (best_effort)
// subscription whose queue is full loses the event, which still consumes a
// delivery sequence number, so the gap is visible. A lossless subscription
// whose queue is full leaves the tail and goes back to catch-up reading from
// the event it could not take, then joins the tail again: it loses nothing
// and slows nobody but itself.
//
// Concurrency: Engine and Subscription are safe for concurrent use. Each tail
// owns one goroutine, stopped and waited for when its last subscription
// leaves or the Engine closes; each catch-up owns one goroutine, stopped and
// waited for by Subscription.Close and Engine.Close. A Subscription's channel
// has exactly one sender at a time (a catch-up or the tail) and is closed
// exactly once, after the last sender is gone. Lock order: Engine.mu,
// tail.mu, Subscription.mu, Engine.goMu.
package delivery
