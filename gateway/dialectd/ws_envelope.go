package dialectd

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
)

// Error codes the WebSocket binding sends (error-model.md).
const (
	wsCodeProtocol = aep.CodeDProtocolError
	wsCodeInternal = aep.CodeDInternalError
	wsCodeTimeout  = aep.CodeDSessionTimeout
)

func wsErr(code, msg string, retryable bool) aep.DError {
	return aep.DError{Code: code, Message: msg, Retryable: retryable}
}

type wsSessionError struct {
	SessionID string     `json:"session_id,omitempty"`
	Error     aep.DError `json:"error"`
}

// wsEventRejected answers an event the gateway did not take
// (delivery.md Rejection).
type wsEventRejected struct {
	AcknowledgedEventID string     `json:"acknowledged_event_id"`
	Error               aep.DError `json:"error"`
}

// wsEventAck answers an event the gateway wrote to the log.
type wsEventAck struct {
	AcknowledgedEventID string `json:"acknowledged_event_id"`
}

// envelope marshals a gateway envelope of type typ, caused by the client
// event causation ("" for none). Safe from any goroutine started after
// session.ready (it reads sessionID and peer).
func (c *wsConn) envelope(typ, causation string, payload any) ([]byte, error) {
	e := aep.NewDEnvelope(typ, c.h.cfg.Source, payload, time.Now())
	e.Target, e.SessionID, e.CausationID = c.peer, c.sessionID, causation
	return e.Marshal()
}

// reply queues a gateway envelope. The reader, or the pipe's worker (peer
// and sessionID are set before ready, before any event is published).
func (c *wsConn) reply(typ, causation string, payload any) bool {
	b, err := c.envelope(typ, causation, payload)
	if err != nil {
		c.log.Error().Err(err).Str("type", typ).Msg("dialectd: encode websocket envelope")
		return false
	}
	return c.push(b)
}

// wsClientEvent is what the binding reads from a control event beyond its
// routing attributes.
type wsClientEvent struct {
	Payload json.RawMessage `json:"payload"`
}

// wsPayload returns the payload member of a validated envelope, or nil.
func wsPayload(raw []byte) json.RawMessage {
	var ev wsClientEvent
	if json.Unmarshal(raw, &ev) != nil {
		return nil
	}
	return ev.Payload
}

// wsStampSubscription adds "subscription_id" to the delivery member that
// appendData put last in ev (it ends with `"}}`), so a client with several
// subscriptions knows which one an event came through.
func wsStampSubscription(ev []byte, id string) []byte {
	if !bytes.HasSuffix(ev, []byte(`"}}`)) {
		return ev
	}
	ev = ev[:len(ev)-2]
	ev = append(ev, `,"subscription_id":`...)
	ev = aep.AppendJSONString(ev, id)
	return append(ev, `}}`...)
}
