package aep

// CodeInfo describes one error code of a dialect's vocabulary.
type CodeInfo struct {
	Dialect Dialect
	Code    string
	// Scope is where the code appears: "ingest", "subscription",
	// "transport", "control", "nack", "session", "task", "tool", "protocol".
	Scope string
	// Status is the HTTP status the spec gives for the code, 0 when it gives
	// none (a code carried only in frames or events). Statuses marked
	// "gateway choice" in Ref are this gateway's reading where the spec names
	// a status without a code.
	Status int
	// WSClose is the WebSocket close code the spec maps the code to, or 0.
	WSClose int
	// Retryable is D's retryability column (error-model.md). R has no
	// retryable notion; for R it says whether the spec describes a retry that
	// can succeed (busy, ambiguous).
	Retryable bool
	// Ref names the spec section that defines the code.
	Ref string
}

// Dialect R codes (kebab-case). The spec's vocabularies are closed sets per
// surface; the same string may serve several surfaces (unauthorized,
// unsupported, limit-exceeded).
const (
	// CodeRInvalidEvent: an Event fails envelope validation (HTTP 400).
	CodeRInvalidEvent = "invalid-event"
	// CodeRLimitExceeded: an endpoint resource limit would be exceeded.
	// AEP-0003 §6.5 defines it for subscribe; this gateway also uses it for
	// an event over its [Limits] (HTTP 413, AEP-0003 §3.2.3 "oversize").
	CodeRLimitExceeded = "limit-exceeded"
	// CodeRInvalidFilter: malformed subscribe request or illegal filter key.
	CodeRInvalidFilter = "invalid-filter"
	// CodeRUnknownDialect: a filter dialect the endpoint did not advertise.
	CodeRUnknownDialect = "unknown-dialect"
	// CodeRUnauthorized: the connection may not do this (subscribe, roster,
	// command routing); HTTP 401/403 per AEP-0003 §8.
	CodeRUnauthorized = "unauthorized"
	// CodeRHelloRequired: the first WebSocket frame was not hello.
	CodeRHelloRequired = "hello-required"
	// CodeRVersionUnsupported: no version in common (WS hello; the HTTP
	// binding answers 426 with {"versions": [...]} instead of a code).
	CodeRVersionUnsupported = "version-unsupported"
	// CodeRReplayExhausted is the marker (WS frame type, SSE comment) sent
	// when a resume position predates the buffer; not an error frame code.
	CodeRReplayExhausted = "replay-exhausted"
	// CodeRUnsupported: a command outside the target's declared accepts
	// (relay error frame, AEP-0004 §4.2; also a nack reason).
	CodeRUnsupported = "unsupported"
	// CodeRAmbiguous: more than one live claimant of the addressed session.
	CodeRAmbiguous = "ambiguous"
	// CodeRNoRoute: no connected emitter owns the addressed session.
	CodeRNoRoute = "no-route"
	// Nack reasons of control.rejected (AEP-0004 §3, registry
	// nack-reasons.json); "unsupported" and "unauthorized" are shared with
	// the constants above. "timeout" is sender-local, never on the wire.
	CodeRNackBusy    = "busy"
	CodeRNackRefused = "refused"
	CodeRNackInvalid = "invalid"
)

// Dialect D codes (snake_case, docs/protocol/error-model.md).
const (
	CodeDProtocolError        = "protocol_error"
	CodeDInvalidEnvelope      = "invalid_envelope"
	CodeDInvalidEventType     = "invalid_event_type"
	CodeDUnsupportedVersion   = "unsupported_version"
	CodeDInternalError        = "internal_error"
	CodeDSessionError         = "session_error"
	CodeDSessionTimeout       = "session_timeout"
	CodeDSessionClosed        = "session_closed"
	CodeDUnauthorized         = "unauthorized"
	CodeDSubscriptionError    = "subscription_error"
	CodeDSubscriptionRejected = "subscription_rejected"
	CodeDTaskError            = "task_error"
	CodeDTaskTimeout          = "task_timeout"
	CodeDTaskCancelled        = "task_cancelled"
	CodeDToolError            = "tool_error"
	CodeDToolTimeout          = "tool_timeout"
)

var codesR = []CodeInfo{
	{DialectR, CodeRInvalidEvent, "ingest", 400, 0, false, "AEP-0003 §3.2.3"},
	{DialectR, CodeRLimitExceeded, "subscription", 413, 0, false, "AEP-0003 §6.5; 413 for an oversize event per §3.2.3 (gateway choice of code)"},
	{DialectR, CodeRInvalidFilter, "subscription", 400, 0, false, "AEP-0003 §6.2 rule 1, §6.5 (400 on SSE: gateway choice)"},
	{DialectR, CodeRUnknownDialect, "subscription", 0, 0, false, "AEP-0003 §6.5"},
	{DialectR, CodeRUnauthorized, "subscription", 401, 0, false, "AEP-0003 §6.5, §4.1 rule 2, §8 (401 missing/bad token, 403 not allowed); AEP-0004 §4.2"},
	{DialectR, CodeRHelloRequired, "transport", 0, 0, false, "AEP-0003 §3.5.1"},
	{DialectR, CodeRVersionUnsupported, "transport", 426, 0, false, "AEP-0003 §4 rule 1 (WS); HTTP: §3.2.2 426 + {\"versions\":[...]}"},
	{DialectR, CodeRReplayExhausted, "transport", 0, 0, false, "AEP-0003 §3.3.3, §5 (marker, not an error)"},
	{DialectR, CodeRUnsupported, "control", 0, 0, false, "AEP-0004 §4.2, §3 (also a nack reason)"},
	{DialectR, CodeRAmbiguous, "control", 0, 0, true, "AEP-0004 §4.2, §4.5"},
	{DialectR, CodeRNoRoute, "control", 0, 0, false, "AEP-0004 §4.2; AEP-0003 §4.1 rule 3"},
	{DialectR, CodeRNackBusy, "nack", 0, 0, true, "AEP-0004 §3; schemas/registry/nack-reasons.json"},
	{DialectR, CodeRNackRefused, "nack", 0, 0, false, "AEP-0004 §3, §2.4"},
	{DialectR, CodeRNackInvalid, "nack", 0, 0, false, "AEP-0004 §3"},
}

var codesD = []CodeInfo{
	{DialectD, CodeDProtocolError, "protocol", 0, 1002, false, "error-model.md Protocol Errors; transport-websocket.md Close Codes"},
	{DialectD, CodeDInvalidEnvelope, "protocol", 400, 0, false, "error-model.md; 400 for a body that is not JSON, transport-sse.md Error Handling"},
	{DialectD, CodeDInvalidEventType, "protocol", 0, 0, false, "error-model.md; transport-sse.md Ingest Endpoint example"},
	{DialectD, CodeDUnsupportedVersion, "protocol", 0, 0, false, "error-model.md; versioning.md Compatibility Rules, Negotiation"},
	{DialectD, CodeDInternalError, "protocol", 500, 1011, true, "error-model.md; transport-sse.md Error Handling; transport-websocket.md Close Codes"},
	{DialectD, CodeDSessionError, "session", 404, 0, false, "error-model.md; 404 unknown session_id, transport-sse.md Error Handling (gateway choice of code)"},
	{DialectD, CodeDSessionTimeout, "session", 0, 0, true, "error-model.md; session.md"},
	{DialectD, CodeDSessionClosed, "session", 410, 0, false, "error-model.md; 410 POST to closed session, transport-sse.md Error Handling"},
	{DialectD, CodeDUnauthorized, "session", 401, 1008, false, "error-model.md; security.md; transport-websocket.md Close Codes (401/403 gateway choice)"},
	{DialectD, CodeDSubscriptionError, "subscription", 0, 0, false, "error-model.md"},
	{DialectD, CodeDSubscriptionRejected, "subscription", 0, 0, false, "error-model.md; subscription.md"},
	{DialectD, CodeDTaskError, "task", 0, 0, false, "error-model.md"},
	{DialectD, CodeDTaskTimeout, "task", 0, 0, true, "error-model.md"},
	{DialectD, CodeDTaskCancelled, "task", 0, 0, false, "error-model.md"},
	{DialectD, CodeDToolError, "tool", 0, 0, false, "error-model.md"},
	{DialectD, CodeDToolTimeout, "tool", 0, 0, true, "error-model.md"},
}

// Codes returns the complete error vocabulary of dialect d (a fresh slice).
func Codes(d Dialect) []CodeInfo {
	switch d {
	case DialectR:
		return append([]CodeInfo(nil), codesR...)
	case DialectD:
		return append([]CodeInfo(nil), codesD...)
	}
	return nil
}

// LookupCode returns the description of code in dialect d's vocabulary.
// Per D's error model an unknown D code is to be treated as protocol_error;
// that mapping is the caller's.
func LookupCode(d Dialect, code string) (CodeInfo, bool) {
	tab := codesR
	if d == DialectD {
		tab = codesD
	} else if d != DialectR {
		return CodeInfo{}, false
	}
	for _, c := range tab {
		if c.Code == code {
			return c, true
		}
	}
	return CodeInfo{}, false
}
