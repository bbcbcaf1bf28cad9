// Package filtering decides, for every event read from the log, which
// subscriptions receive it. It owns both dialects' filter grammars, their
// compiled matchers and the per-node subscription index.
//
// Filters work on the neutral routing attributes ([aep.Attrs], decoded from
// Kafka record headers by other code) and never on the event payload. A
// filter only ever matches events of its own dialect.
//
//   - Dialect D (axisrobo AEP 0.1, seed 000): [ParseD] compiles the JSON
//     filter object of subscription.requested, [ParseDQuery] the SSE query
//     form. Refusals are [*Error] with code subscription_rejected.
//   - Dialect R (agenteventprotocol.io AEP-0003 §6 attr-match): [ParseR].
//     Refusals are [*Error] with code invalid-filter (or limit-exceeded).
//
// A compiled [*Filter] is immutable; Match never allocates. An [Index]
// holds every active subscription of a node and routes one event to the
// subscriptions it matches in time proportional to the candidates filed
// under the event's own attribute values, not to the number of
// subscriptions.
//
// Concurrency: everything is safe for concurrent use. Index.Match is
// lock-free (one atomic load of an immutable snapshot); Index.Add and
// Index.Remove serialize among themselves and publish a new snapshot by
// copy-on-write, so they never stall matching. docs/filtering.md records
// the grammar decisions where the specifications are silent.
package filtering
