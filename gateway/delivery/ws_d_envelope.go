package delivery

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/aep-gateway/aep-gateway/aep"
)

// Error codes the WebSocket binding sends (error-model.md).
const (
	wsCodeProtocol = aep.CodeDProtocolError
	wsCodeInternal = aep.CodeDInternalError
	wsCodeTimeout  = aep.CodeDSessionTimeout
)

// wsEnvelopeD is an envelope the gateway generates (envelope schema: the
// six required members plus routing to the client).
type wsEnvelopeD struct {
	Version     string `json:"aep_version"`
	ID          string `json:"id"`
	Type        string `json:"type"`
	Source      string `json:"source"`
	Target      string `json:"target,omitempty"`
	SessionID   string `json:"session_id,omitempty"`
	CausationID string `json:"causation_id,omitempty"`
	CreatedAt   string `json:"created_at"`
	Payload     any    `json:"payload"`
}

// wsErrorD is dialect D's error object (error-model.md).
type wsErrorD struct {
	Code      string            `json:"code"`
	Message   string            `json:"message"`
	Retryable bool              `json:"retryable"`
	Details   map[string]string `json:"details,omitempty"`
}

func wsErr(code, msg string, retryable bool) wsErrorD {
	return wsErrorD{Code: code, Message: msg, Retryable: retryable}
}

type wsSessionErrorD struct {
	SessionID string   `json:"session_id,omitempty"`
	Error     wsErrorD `json:"error"`
}

// wsEventRejectedD answers an event the gateway did not take
// (delivery.md Rejection).
type wsEventRejectedD struct {
	AcknowledgedEventID string   `json:"acknowledged_event_id"`
	Error               wsErrorD `json:"error"`
}

// wsEventAckD answers an event the gateway wrote to the log.
type wsEventAckD struct {
	AcknowledgedEventID string `json:"acknowledged_event_id"`
}

// envelope marshals a gateway envelope of type typ, caused by the client
// event causation ("" for none). Safe from any goroutine started after
// session.ready (it reads sessionID and peer).
func (c *wsConnD) envelope(typ, causation string, payload any) ([]byte, error) {
	return json.Marshal(wsEnvelopeD{
		Version: "0.1", ID: "evt_" + ulid.Make().String(), Type: typ, Source: c.h.cfg.Source,
		Target: c.peer, SessionID: c.sessionID, CausationID: causation,
		CreatedAt: time.Now().UTC().Format(time.RFC3339Nano), Payload: payload,
	})
}

// reply queues a gateway envelope. Reader only.
func (c *wsConnD) reply(typ, causation string, payload any) bool {
	b, err := c.envelope(typ, causation, payload)
	if err != nil {
		c.log.Error().Err(err).Str("type", typ).Msg("delivery: encode websocket envelope")
		return false
	}
	return c.push(b)
}

// wsClientEventD is what the binding reads from a control event beyond its
// routing attributes.
type wsClientEventD struct {
	Payload json.RawMessage `json:"payload"`
}

// wsPayload returns the payload member of a validated envelope, or nil.
func wsPayload(raw []byte) json.RawMessage {
	var ev wsClientEventD
	if json.Unmarshal(raw, &ev) != nil {
		return nil
	}
	return ev.Payload
}

// wsStampSubscription adds "subscription_id" to the delivery member that
// appendDataD put last in ev (it ends with `"}}`), so a client with several
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
