// Package transport writes streams to clients, the same way for every
// binding and dialect: ServeSSE is the one SSE write loop (batched writes
// with per-write deadlines, heartbeat comments, last words on shutdown),
// Conn the one WebSocket connection (over Upgrade and Socket, a lean RFC
// 6455 server layer that writes a run of queued messages with one write,
// and parked on the Hub's poller while idle) and WriteJSON the one JSON
// response writer. It knows bytes and sockets, not
// AEP: the bindings hand it encoded messages.
package transport
