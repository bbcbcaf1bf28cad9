package filtering

import (
	"fmt"

	"github.com/aep-gateway/aep-gateway/aep"
)

// Error codes a client sees when its filter is refused. They are the
// dialects' own vocabularies: D errors are snake_case with retryable=false
// (D docs/protocol/error-model.md), R subscribe errors come from the closed
// set of AEP-0003 §6.5.
const (
	// CodeSubscriptionRejected is dialect D's code for every refused filter.
	CodeSubscriptionRejected = "subscription_rejected"
	// CodeInvalidFilter is dialect R's code for a malformed filter or an
	// illegal key (AEP-0003 §6.2 rule 1, §6.5).
	CodeInvalidFilter = "invalid-filter"
	// CodeLimitExceeded is dialect R's code for a well-formed filter that
	// exceeds one of this gateway's [Limits] (AEP-0003 §6.5).
	CodeLimitExceeded = "limit-exceeded"
)

// Error is a refused filter. Code is stable and dialect-specific; Message is
// a human-readable sentence naming what is wrong; Field names the offending
// filter member when there is one. A filter error is never retryable: the
// same filter is refused again.
type Error struct {
	Dialect aep.Dialect
	Code    string
	Field   string
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("filtering: %s: %s", e.Code, e.Message)
}

// Retryable is always false: a refused filter is refused again (D error
// model: validation errors are not retryable).
func (e *Error) Retryable() bool { return false }

func errD(field, format string, args ...any) *Error {
	return &Error{Dialect: aep.DialectD, Code: CodeSubscriptionRejected, Field: field, Message: fmt.Sprintf(format, args...)}
}

func errR(field, format string, args ...any) *Error {
	return &Error{Dialect: aep.DialectR, Code: CodeInvalidFilter, Field: field, Message: fmt.Sprintf(format, args...)}
}

func errRLimit(field, format string, args ...any) *Error {
	return &Error{Dialect: aep.DialectR, Code: CodeLimitExceeded, Field: field, Message: fmt.Sprintf(format, args...)}
}
