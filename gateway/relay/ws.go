package relay

import "net/http"

// Socket is the WebSocket binding (not yet).
func (rl *Relay) Socket() http.Handler { return http.NotFoundHandler() }
