// Package gateway is the HTTP surface of aep-gateway: routing (chi),
// authentication of tenants, the ingest endpoints of both AEP dialects,
// discovery, health and metrics. Ingest validates every event with package
// aep, writes it to the tenant's Kafka topic through a Writer (acks=all,
// idempotent) and answers only after Kafka acknowledged each event it
// reports as accepted.
//
// A Server is safe for concurrent use. Its background work (the broker
// readiness probe) is owned by the Server and stopped by Shutdown, which is
// idempotent.
package gateway
