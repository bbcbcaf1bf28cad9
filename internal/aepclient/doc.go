// Package aepclient is the client of aep-gateway's HTTP and WebSocket API,
// shared by aepctl and aepbench: Client posts event batches of either
// dialect (Send, SendRetry with backoff) and calls the JSON endpoints
// (subscriptions, acks); OpenStream and the WebSocket openers read live
// events over SSE or WebSocket in dialect R or D.
//
// A Client is safe for concurrent use. A Source is owned by one goroutine.
package aepclient
