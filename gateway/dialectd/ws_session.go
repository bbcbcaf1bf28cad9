package dialectd

import (
	"encoding/json"
	"strings"

	"github.com/coder/websocket"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/ingest"
)

// wsCapabilities is the capabilities object of session.ready and
// capabilities.declared (session.md; reliability.md Durability Guarantees).
type wsCapabilities struct {
	Protocol            string   `json:"protocol"`
	AEPVersion          string   `json:"aep_version"`
	Transports          []string `json:"transports"`
	DeliveryModes       []string `json:"delivery_modes"`
	Features            []string `json:"features"`
	MaxPayloadSize      int      `json:"max_payload_size"`
	HeartbeatIntervalMS int64    `json:"heartbeat_interval_ms"`
	Delivery            struct {
		Modes             []string `json:"modes"`
		DeadLetterSupport bool     `json:"dead_letter_support"`
		// ReplayWindowMS is the topic's retention; max_retention_events is
		// not announced: Kafka retains by time and bytes, not by count
		// (docs/dialects.md).
		ReplayWindowMS int64 `json:"replay_window_ms,omitempty"`
	} `json:"delivery"`
}

type wsSessionReady struct {
	SessionID    string         `json:"session_id"`
	Capabilities wsCapabilities `json:"capabilities"`
}

type wsSessionOpened struct {
	SessionID string `json:"session_id"`
	Version   string `json:"version"`
}

func (h *WSHandler) capabilities() wsCapabilities {
	c := wsCapabilities{
		Protocol: "aep", AEPVersion: "0.1",
		Transports:     []string{"websocket", "sse"},
		DeliveryModes:  []string{ModeBestEffort, ModeAtLeastOnce, ModeReplayable},
		Features:       []string{"envelope", "subscription", "error_model", "cursor_replay", "publish"},
		MaxPayloadSize: h.cfg.MaxMessageBytes,
	}
	if h.cfg.Heartbeat > 0 {
		c.HeartbeatIntervalMS = h.cfg.Heartbeat.Milliseconds()
	}
	c.Delivery.Modes = c.DeliveryModes
	c.Delivery.DeadLetterSupport = true
	if h.cfg.ReplayWindow > 0 {
		c.Delivery.ReplayWindowMS = h.cfg.ReplayWindow.Milliseconds()
	}
	return c
}

// handle dispatches one received message; false ends the read loop (the
// close frame is queued).
func (c *wsConn) handle(raw []byte) bool {
	attrs, err := aep.ParseAs(aep.DialectD, raw, c.h.cfg.Limits)
	if err != nil {
		ae := aep.AsError(err)
		if !c.ready {
			c.fail(wsCodeProtocol, "the first event must be a valid session.opened envelope: "+ae.Message, websocket.StatusProtocolError)
			return false
		}
		c.flushAcks()
		c.pipe.Drain()
		// The event did not validate, but its id usually reads: the
		// refusal names it (acknowledged_event_id, causation_id) so the
		// client can tell which event it answers.
		id := rawEventID(raw)
		return c.reply("event.rejected", id, wsEventRejected{AcknowledgedEventID: id, Error: aep.DErrorOf(ae)})
	}
	switch attrs.Type {
	case "event.acknowledged", "event.rejected":
		if c.ready {
			return c.settle(&attrs, wsPayload(raw), attrs.Type == "event.rejected")
		}
	default:
		// Whatever the gateway answers from here on comes after the acks
		// read before are in Kafka (and applied), and, but for an event
		// published, after the answers to the events published before.
		c.flushAcks()
		if !publishable(attrs.Type) {
			c.pipe.Drain()
		}
	}
	switch attrs.Type {
	case "session.opened":
		return c.open(&attrs, raw)
	case "capabilities.requested":
		return c.reply("capabilities.declared", attrs.ID, c.h.capabilities())
	}
	if !c.ready {
		c.fail(wsCodeProtocol, "the first event must be session.opened, not "+attrs.Type, websocket.StatusProtocolError)
		return false
	}
	switch attrs.Type {
	case "session.heartbeat":
		return true
	case "session.closed":
		c.closeWith(websocket.StatusNormalClosure, "normal")
		return false
	case "subscription.requested":
		return c.subscribe(&attrs, wsPayload(raw))
	case "subscription.cancelled":
		return c.unsubscribe(&attrs, wsPayload(raw))
	}
	if strings.HasPrefix(attrs.Type, "session.") || strings.HasPrefix(attrs.Type, "subscription.") {
		return c.reply("event.rejected", attrs.ID, wsEventRejected{
			AcknowledgedEventID: attrs.ID,
			Error:               wsErr(wsCodeProtocol, attrs.Type+" is not accepted from a client", false),
		})
	}
	return c.publish(&attrs, raw)
}

// open handles session.opened: the first one answers session.ready, a later
// one is refused.
func (c *wsConn) open(attrs *aep.Attrs, raw []byte) bool {
	if c.ready {
		return c.reply("event.rejected", attrs.ID, wsEventRejected{
			AcknowledgedEventID: attrs.ID, Error: wsErr(wsCodeProtocol, "the session is already open", false),
		})
	}
	var p wsSessionOpened
	if err := json.Unmarshal(wsPayload(raw), &p); err != nil || p.SessionID == "" || p.Version == "" {
		c.fail(wsCodeProtocol, "session.opened needs a payload with session_id and version", websocket.StatusProtocolError)
		return false
	}
	c.sessionID, c.peer = p.SessionID, attrs.Source
	if p.Version != "0.1" {
		c.fail(aep.CodeDUnsupportedVersion, "unsupported version "+p.Version+"; this gateway speaks 0.1", websocket.StatusProtocolError)
		return false
	}
	if !c.reply("session.ready", attrs.ID, wsSessionReady{SessionID: c.sessionID, Capabilities: c.h.capabilities()}) {
		return false
	}
	c.ready = true
	c.conn.Ready()
	c.conn.StartHeartbeat()
	return true
}

// publishable reports whether an event of type typ from the client is
// published (handle's last case) rather than answered by the gateway.
func publishable(typ string) bool {
	return typ != "capabilities.requested" && !strings.HasPrefix(typ, "session.") && !strings.HasPrefix(typ, "subscription.")
}

// publish writes an event the client emits through ingest: queued on the
// connection's pipe, written with the events read while the write before
// it was in flight, in order; published answers. Reader only.
func (c *wsConn) publish(attrs *aep.Attrs, raw []byte) bool {
	if c.pipe == nil {
		c.pipe = ingest.NewPipe(ingest.PipeConfig{
			Func: c.h.ingest, Tenant: c.tenant, Context: c.ctx,
			Done: c.published1, Go: c.conn.Run, Logger: c.log,
			Panicked: func() { c.conn.CloseNow(websocket.StatusInternalError, "internal_error") },
		})
	}
	c.pipe.Submit(raw, attrs.ID) // raw is this message's own (transport.Conn.Serve)
	return true
}

// published1 answers one published event: event.acknowledged when it is in
// the log, event.rejected otherwise. The pipe's worker.
func (c *wsConn) published1(id string, r *ingest.Result) {
	switch {
	case r.Accepted():
		c.published++
		c.reply("event.acknowledged", id, wsEventAck{AcknowledgedEventID: id})
	case r.Err != nil:
		c.reply("event.rejected", id, wsEventRejected{AcknowledgedEventID: id, Error: aep.DErrorOf(r.Err)})
	default:
		c.log.Warn().Err(r.WriteErr).Msg("dialectd: websocket publish")
		c.reply("event.rejected", id, wsEventRejected{
			AcknowledgedEventID: id, Error: wsErr(wsCodeInternal, "the event log did not take the event; retry with the same id", true),
		})
	}
}

// maxRejectedIDBytes bounds the id a refusal repeats back.
const maxRejectedIDBytes = 256

// rawEventID is the string id of an envelope that did not validate, or ""
// when there is none to read (not a JSON object, no string id, an id
// longer than maxRejectedIDBytes).
func rawEventID(raw []byte) string {
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	var id string
	if json.Unmarshal(raw, &m) != nil || json.Unmarshal(m.ID, &id) != nil || len(id) > maxRejectedIDBytes {
		return ""
	}
	return id
}
