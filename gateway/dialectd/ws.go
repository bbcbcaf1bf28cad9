package dialectd

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/ingest"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// WSSubprotocol is the WebSocket subprotocol of dialect D 0.1
// (transport-websocket.md Subprotocol).
const WSSubprotocol = "aep-0.1"

// WSConfig configures the dialect D WebSocket binding. Zero fields mean the
// documented defaults.
type WSConfig struct {
	// MaxMessageBytes bounds one received message; a bigger one closes the
	// connection with 1009. It is announced as max_payload_size. Zero
	// means ingest.DefaultMaxEventBytes.
	MaxMessageBytes int
	// Heartbeat is the WebSocket ping interval, announced as
	// heartbeat_interval_ms; a peer that has not answered a ping within
	// 3 intervals is closed with 1001. Zero means 30s; negative disables
	// pings (announced as 0).
	Heartbeat time.Duration
	// WriteTimeout bounds each write to the client; a write that times out
	// ends the connection. Zero means 10s.
	WriteTimeout time.Duration
	// SetupTimeout bounds the work to create one subscription (topic state,
	// Kafka offsets). Zero means 10s.
	SetupTimeout time.Duration
	// Outbound is the length of each connection's outbound queue, in
	// messages. Zero means 256.
	Outbound int
	// Queue is each subscription's queue length. Zero means the Engine's.
	Queue int
	// MaxSubscriptions bounds the live subscriptions of one connection.
	// Zero means 32.
	MaxSubscriptions int
	// ReplayWindow is how far back a replayable subscription can resume:
	// the events topic's retention (--topic-retention), announced as
	// capabilities.delivery.replay_window_ms (reliability.md). Zero or
	// negative (retention without a time bound) is not announced.
	ReplayWindow time.Duration
	// Source is the source of the envelopes the gateway generates. Empty
	// means "gateway:aep-gateway".
	Source string
	// AckPolicy is the redelivery policy of at_least_once subscriptions
	// (zero fields: D reliability.md defaults, ack timeout 30s).
	AckPolicy durable.AckPolicy
	// Hub tracks the connections with every other stream of the node
	// (per-tenant cap, shutdown). Nil means a Hub of the handler's own,
	// without a cap.
	Hub *transport.Hub
	// OriginPatterns authorizes cross-origin browsers (coder/websocket
	// AcceptOptions.OriginPatterns); the request host is always allowed.
	OriginPatterns []string
	// AckBatch is the most acks and rejections read from one connection
	// that are written together, as one record of the subscription
	// journal per attached durable subscription. Zero means
	// DefaultWSAckBatch; 1 writes each on its own.
	AckBatch int
	// AckQueue is the most acks and rejections of one connection waiting
	// to be written; a reader that finds the queue full waits for room
	// (backpressure on the socket: nothing is dropped). Its buffer grows
	// as it fills. Zero means DefaultWSAckQueue.
	AckQueue int
	// AckLinger is how long the first ack of a batch waits for more
	// before the batch is written, on a connection with an attached
	// durable subscription (others only apply acks locally); a message
	// that waits for an answer writes what is queued at once. Zero means
	// DefaultWSAckLinger; negative means no wait (what has queued
	// meanwhile still goes together).
	AckLinger time.Duration
	// Registerer receives the binding's metrics
	// (aep_websocket_ack_journal_errors_total). Nil means unregistered.
	Registerer prometheus.Registerer
	// Limits are the envelope limits control events are checked with.
	// Zero fields mean aep's defaults.
	Limits aep.Limits
	Logger zerolog.Logger
}

func (c *WSConfig) withDefaults() {
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = ingest.DefaultMaxEventBytes
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = 30 * time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.SetupTimeout <= 0 {
		c.SetupTimeout = 10 * time.Second
	}
	if c.Outbound <= 0 {
		c.Outbound = 256
	}
	if c.MaxSubscriptions <= 0 {
		c.MaxSubscriptions = 32
	}
	if c.AckBatch <= 0 {
		c.AckBatch = DefaultWSAckBatch
	}
	if c.AckQueue <= 0 {
		c.AckQueue = DefaultWSAckQueue
	}
	if c.AckLinger == 0 {
		c.AckLinger = DefaultWSAckLinger
	}
	if c.Source == "" {
		c.Source = "gateway:aep-gateway"
	}
	c.Limits = c.Limits.WithDefaults()
}

// WSHandler is the dialect D WebSocket binding (GET /aep,
// transport-websocket.md). It is an http.Handler; Shutdown closes its
// connections.
type WSHandler struct {
	e      *engine.Engine
	dc     *durable.Cluster // at_least_once subscriptions
	kr     *cursor.Keyring
	ingest ingest.Func
	cfg    WSConfig

	hub       *transport.Hub
	ackErrors prometheus.Counter
	logs      transport.LoggerCache // a connection's logger, per tenant
}

// NewWSHandler returns the dialect D WebSocket binding. Subscriptions read
// from e, at_least_once ones from dc; cursors are signed and checked with kr (the same cursors as the SSE
// stream's); events the client publishes go to ingest. The tenant is the
// request context's (tenant.FromContext), as authentication put it.
func NewWSHandler(e *engine.Engine, dc *durable.Cluster, kr *cursor.Keyring, ingest ingest.Func, cfg WSConfig) *WSHandler {
	cfg.withDefaults()
	return &WSHandler{
		e: e, dc: dc, kr: kr, ingest: ingest, cfg: cfg,
		hub: hubOf(cfg.Hub), ackErrors: newAckErrors(cfg.Registerer),
	}
}

var _ http.Handler = (*WSHandler)(nil)

// ServeHTTP upgrades the request and serves the connection until it closes.
// A handshake that does not offer the aep-0.1 subprotocol is refused with
// 400 and dialect D's protocol_error before the upgrade.
func (h *WSHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !wsOffersSubprotocol(r.Header, WSSubprotocol) {
		writeErr(w, http.StatusBadRequest, aep.CodeDProtocolError,
			"the WebSocket handshake must offer the subprotocol "+WSSubprotocol, false,
			map[string]string{"header": "Sec-WebSocket-Protocol"})
		return
	}
	tn := requestTenant(r)
	if tn.IsZero() { // not mounted behind authentication
		writeErr(w, http.StatusUnauthorized, aep.CodeDUnauthorized, "no authenticated tenant", false, nil)
		return
	}
	stream, ok := admit(w, h.hub, tn)
	if !ok {
		return
	}
	ws, err := transport.Upgrade(w, r, transport.UpgradeOptions{
		Subprotocols:   []string{WSSubprotocol},
		OriginPatterns: h.cfg.OriginPatterns,
		ReadLimit:      int64(h.cfg.MaxMessageBytes),
	})
	if err != nil {
		stream.Leave()
		return // Upgrade wrote the response
	}
	c := newWSConn(h, ws, tn, stream)
	stream.OnShutdown(c.goAway)
	c.serve() // returns early when the connection parks; its end calls stream.Leave
}

// Shutdown shuts the handler's Hub down: new connections are refused,
// every open stream of the Hub is closed (WebSocket connections with 1001,
// going away) and waited for, or ctx. It is idempotent and returns
// ctx.Err() when ctx ended first. With a Hub shared by several handlers
// (WSConfig.Hub), the owner of the Hub shuts it down instead.
func (h *WSHandler) Shutdown(ctx context.Context) error { return h.hub.Shutdown(ctx) }

// wsOffersSubprotocol reports whether the handshake's Sec-WebSocket-Protocol
// headers list proto.
func wsOffersSubprotocol(h http.Header, proto string) bool {
	for _, v := range h.Values("Sec-WebSocket-Protocol") {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.TrimSpace(tok) == proto {
				return true
			}
		}
	}
	return false
}
