// Package partitioning owns the Kafka layout of the gateway: tenant topic
// naming, the choice of record key, Kafka-compatible murmur2 placement, the
// routing-attribute headers of each record, and topic provisioning.
//
// The record format it defines is a public contract (docs/record-format.md):
// any Kafka client reading a tenant topic sees the event bytes exactly as the
// emitter sent them, keyed by session, with the routing attributes in
// aep-* headers.
//
// Naming, Key, Partition and the header codec are pure functions, safe for
// concurrent use. Provisioner is safe for concurrent use and creates each
// topic at most once per process (concurrent callers share one attempt).
package partitioning
