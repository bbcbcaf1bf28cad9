package gateway

import (
	"net/http"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// writeJSON writes v as the JSON body of a response with status.
func writeJSON(w http.ResponseWriter, status int, v any) { transport.WriteJSON(w, status, v) }

// rError is a dialect R error body (AEP-0003 §3.2.3), extended with the
// failing event's place in the batch.
type rError = aep.RError

func writeR(w http.ResponseWriter, status int, code, detail string) {
	writeJSON(w, status, rError{Error: code, Detail: detail})
}

// dErrorObj is dialect D's error object (error-model.md).
type dErrorObj = aep.DError

func writeD(w http.ResponseWriter, status int, code, msg string, retryable bool) {
	writeJSON(w, status, aep.DErrorBody{Error: dErrorObj{Code: code, Message: msg, Retryable: retryable}})
}

func dErrorFrom(e *aep.Error) dErrorObj { return aep.DErrorOf(e) }

func invalidCode(d aep.Dialect) string {
	if d == aep.DialectD {
		return aep.CodeDInvalidEnvelope
	}
	return aep.CodeRInvalidEvent
}

// limitCode is the dialect's code for a limit: R has limit-exceeded
// (AEP-0003 §6.5); D's error model has no limit code, so a limit is a
// protocol_error whose message names the limit (docs/dialects.md).
func limitCode(d aep.Dialect) string {
	if d == aep.DialectD {
		return aep.CodeDProtocolError
	}
	return aep.CodeRLimitExceeded
}
