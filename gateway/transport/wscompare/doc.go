// Package wscompare measures the gateway's hand-written RFC 6455 server
// layer (gateway/transport: Upgrade, Socket, AppendFrame) against
// github.com/gobwas/ws, the library made for WebSockets parked on epoll,
// in one run (docs/architecture.md, "WebSocket framing: hand-written or
// gobwas/ws"). It is a module of its own so that the gateway does not
// depend on gobwas/ws to build:
//
//	cd gateway/transport/wscompare && go test -run '^$' -bench . -benchmem -count 6
package wscompare
