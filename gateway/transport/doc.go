// Package transport writes streams to clients, the same way for every
// binding and dialect: ServeSSE is the one SSE write loop (batched writes
// with per-write deadlines, heartbeat comments, last words on shutdown),
// Conn the one WebSocket connection (over Upgrade and Socket, a lean RFC
// 6455 server layer that writes a run of queued messages with one write,
// and parked on the Hub's poller while idle) and WriteJSON the one JSON
// response writer. It knows bytes and sockets, not
// AEP: the bindings hand it encoded messages.
//
// Idle SSE streams are parked (sse_park.go): on HTTP/1.x without TLS, on
// Linux, ServeSSE hijacks the connection and returns, and the stream then
// holds no goroutine and none of net/http's buffers until its queue, its
// heartbeat timer, the poller (internal/netpoll: the client left) or the
// Hub's shutdown wakes it. HTTP/2, TLS, other platforms and
// Hub.SetParking(false) keep the stream in the handler's goroutine, with the
// same behaviour on the wire but the body framing (chunked there,
// delimited by the connection's close when parked).
//
// Ownership: the Hub admits every stream (SSE and WebSocket), ends them
// all on Shutdown and waits for them; it owns the poller and the few
// goroutines that end parked streams whose client left. A parked stream
// runs its binding's Cleanup exactly once, from whichever goroutine ends
// it, and owns its descriptor: the descriptor leaves the poller before it
// is closed on every path (a failed write shuts the socket down instead
// of closing it). When the poller fails, the Hub logs and counts it,
// reports it (PollerErr, for /readyz) and moves every parked stream to a
// goroutine of its own (hub_poll.go); nothing parks after that.
package transport
