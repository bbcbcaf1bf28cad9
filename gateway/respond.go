package gateway

import (
	"encoding/json"
	"net/http"

	"github.com/aep-gateway/aep-gateway/aep"
)

// writeJSON writes v as the JSON body of a response with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// rError is a dialect R error body (AEP-0003 §3.2.3), extended with the
// failing event's place in the batch.
type rError struct {
	Error  string `json:"error"`
	Detail string `json:"detail"`
	Field  string `json:"field,omitempty"`
	Line   int    `json:"line,omitempty"`  // 1-based line of the body
	Index  *int   `json:"index,omitempty"` // 0-based event index in the batch
	// Invalid counts the batch's invalid events when more than one failed.
	Invalid int `json:"invalid,omitempty"`
}

func writeR(w http.ResponseWriter, status int, code, detail string) {
	writeJSON(w, status, rError{Error: code, Detail: detail})
}

// dErrorObj is dialect D's error object (error-model.md).
type dErrorObj struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	Details   any    `json:"details,omitempty"`
}

// dError is the body of a D response that refuses a whole request.
type dError struct {
	Error dErrorObj `json:"error"`
}

func writeD(w http.ResponseWriter, status int, code, msg string, retryable bool) {
	writeJSON(w, status, dError{Error: dErrorObj{Code: code, Message: msg, Retryable: retryable}})
}

func dErrorFrom(e *aep.Error) dErrorObj {
	o := dErrorObj{Code: e.Code, Message: e.Message, Retryable: e.Retryable}
	if e.Field != "" {
		o.Details = map[string]string{"field": e.Field}
	}
	return o
}

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
