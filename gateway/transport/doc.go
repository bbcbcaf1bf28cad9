// Package transport writes streams to clients, the same way for every
// binding and dialect: ServeSSE is the one SSE write loop (batched writes
// with per-write deadlines, heartbeat comments, last words on shutdown) and
// WriteJSON the one JSON response writer. It knows bytes and sockets, not
// AEP: the bindings hand it encoded messages.
package transport
