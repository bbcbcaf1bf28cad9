// Package dialectd is dialect D's (axisrobo AEP 0.1) streaming bindings:
// the SSE event stream (GET /aep/events, transport-sse.md), the WebSocket
// binding (GET /aep, subprotocol aep-0.1, transport-websocket.md) and the
// durable at_least_once subscriptions API (/aep/subscriptions,
// docs/delivery-durable-d.md). It turns the engine's deliveries
// (gateway/engine) into D envelopes stamped with this gateway's
// `delivery` member and signed cursors (package cursor), writes them with
// the shared transport (gateway/transport), and owns everything D-specific
// the engine needs: the dead-letter record (event.dead_lettered) and D's
// error codes.
//
// The tenant of every request is the one authentication put in its context
// (gateway/tenant); events published over the WebSocket go through the
// ingest.Func it is given, under the same rules as POST /aep/events. It does
// not import the HTTP server package.
//
// Concurrency: the handlers are safe for concurrent use; each SSE stream runs
// in its request's goroutine; a WebSocket connection owns a reader (the
// request's goroutine), a writer, a heartbeat timer (whose goroutine lives
// only while a ping waits for its pong), one pump per subscription and one
// that writes the acks it reads (each a goroutine only while it has work),
// all joined before its handler returns. Shutdown(ctx) of the WebSocket
// handler closes every connection with 1001 and waits, up to ctx.
package dialectd
