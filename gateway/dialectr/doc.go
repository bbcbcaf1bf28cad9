// Package dialectr makes the gateway a dialect R (agenteventprotocol.io)
// collector and relay on the consuming side: the SSE stream (GET /stream,
// AEP-0003 §3.3) and the WebSocket binding (/socket, §3.5, §4, §6.5), with
// attr-match filters (§6), capture ceilings (§6.4), exact resume by
// (session, epoch, seq) (§7) and replay-exhausted markers (§5). Events are
// read through the delivery engine (gateway/engine) and go out
// byte-identical to what the emitter sent, unless a capture ceiling
// down-levels them. WebSocket emitters' events are written through
// the ingest.Func it is given (the gateway's ingest), under the same rules as POST /events.
//
// It owns, per tenant and node, one cursor.Indexer (writing the session
// checkpoints of the tenant topic) and one cursor.Resolver (mapping resume
// positions to offsets), started on the tenant's first stream and closed by
// Relay.Close. docs/relay.md records the choices made where the
// specification is silent.
//
// Concurrency: Relay is safe for concurrent use. Every SSE stream runs in its
// request's goroutine. Every WebSocket connection owns one reader (the
// request's goroutine), one writer goroutine fed by a bounded queue, and one
// pump goroutine per subscription; the reader stops and waits for all of
// them before the handler returns. Relay.Close ends every stream and
// connection (WebSocket ones with a closing frame), waits for their
// handlers, then closes the indexers and resolvers.
package dialectr
