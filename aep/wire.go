package aep

import (
	"encoding/json"
	"time"

	"github.com/oklog/ulid/v2"
)

// The wire shapes the gateway itself writes, one definition each, shared by
// the HTTP ingest, the streaming bindings and the delivery engine's
// callers.

// DError is dialect D's error object (error-model.md).
type DError struct {
	Code      string         `json:"code"`
	Message   string         `json:"message"`
	Retryable bool           `json:"retryable"`
	Details   map[string]any `json:"details,omitempty"`
}

// DErrorBody is a D response body that refuses a whole request.
type DErrorBody struct {
	Error DError `json:"error"`
}

// DErrorOf is the error object of a validation error.
func DErrorOf(e *Error) DError {
	o := DError{Code: e.Code, Message: e.Message, Retryable: e.Retryable}
	if e.Field != "" {
		o.Details = map[string]any{"field": e.Field}
	}
	if e.Kind == KindVersion {
		// versioning.md: a version refusal lists the versions accepted
		if o.Details == nil {
			o.Details = map[string]any{}
		}
		o.Details["supported"] = SupportedVersions(DialectD)
	}
	return o
}

// DGatewaySource is the source of the notices the gateway generates on
// streams (event.replayed, event.redelivered, ...).
const DGatewaySource = "aep-gateway"

// DEnvelope is a D envelope the gateway generates: the six required
// members, routing to the client where it has one, and a payload.
type DEnvelope struct {
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

// NewDEnvelope returns an envelope of type typ from source with a fresh id
// (evt_<ULID>) created at now.
func NewDEnvelope(typ, source string, payload any, now time.Time) DEnvelope {
	return DEnvelope{
		Version: "0.1", ID: "evt_" + ulid.Make().String(), Type: typ, Source: source,
		CreatedAt: now.UTC().Format(time.RFC3339Nano), Payload: payload,
	}
}

// Marshal encodes the envelope.
func (e DEnvelope) Marshal() ([]byte, error) { return json.Marshal(e) }

// DNotice encodes a gateway notice of type typ (source DGatewaySource).
func DNotice(typ string, payload any, now time.Time) ([]byte, error) {
	return NewDEnvelope(typ, DGatewaySource, payload, now).Marshal()
}

// DReplayed is the payload of event.replayed (seed 001), with the gaps
// the replay met, where any.
type DReplayed struct {
	FromCursor     string `json:"from_cursor"`
	ToCursor       string `json:"to_cursor"`
	EventsReplayed uint64 `json:"events_replayed"`
	Gaps           []DGap `json:"gaps,omitempty"`
}

// DGap is a stretch of a partition a replay could not deliver.
type DGap struct {
	Partition int32  `json:"partition"`
	Requested int64  `json:"requested"`
	RestartAt int64  `json:"restart_at"`
	Reason    string `json:"reason"`
}

// DRedelivered is the payload of event.redelivered (delivery.md).
type DRedelivered struct {
	OriginalEventID string `json:"original_event_id"`
	Attempt         int    `json:"attempt"`
	SubscriptionID  string `json:"subscription_id"`
}

// DDeadLettered is the payload of event.dead_lettered (reliability.md).
type DDeadLettered struct {
	OriginalEventID string          `json:"original_event_id"`
	SubscriptionID  string          `json:"subscription_id"`
	Target          string          `json:"target,omitempty"` // the original event's target, when it had one (reliability.md)
	Attempts        int             `json:"attempts"`
	LastAttemptAt   string          `json:"last_attempt_at"`
	LastError       DError          `json:"last_error"`
	OriginalEvent   json.RawMessage `json:"original_event"`
}

// DSubscriptionEnded is the payload of the notices that end a
// subscription: subscription.expired, subscription.cancelled (with the
// last cursor delivered, and the error when it failed).
type DSubscriptionEnded struct {
	SubscriptionID string  `json:"subscription_id"`
	Reason         string  `json:"reason,omitempty"`
	Cursor         string  `json:"cursor,omitempty"`
	Error          *DError `json:"error,omitempty"`
}

// RError is a dialect R error body (AEP-0003 §3.2.3), extended with the
// failing event's place in an ingest batch.
type RError struct {
	Error  string `json:"error"`
	Detail string `json:"detail"`
	Field  string `json:"field,omitempty"`
	Line   int    `json:"line,omitempty"`  // 1-based line of the body
	Index  *int   `json:"index,omitempty"` // 0-based event index in the batch
	// Invalid counts the batch's invalid events when more than one failed.
	Invalid int `json:"invalid,omitempty"`
}
