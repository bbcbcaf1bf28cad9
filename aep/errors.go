package aep

import (
	"errors"
	"net/http"
	"strconv"
)

// Kind classifies why an event was refused, independently of the dialect's
// code. The HTTP handlers pick a status from it ([Error.HTTPStatus]).
type Kind uint8

const (
	// KindSyntax: the bytes are not one well-formed JSON object in valid
	// UTF-8 (malformed JSON, trailing data, invalid UTF-8, a lone surrogate
	// escape).
	KindSyntax Kind = iota + 1
	// KindLimit: the event exceeds one of the [Limits].
	KindLimit
	// KindDialect: the version attribute is missing, both dialects' version
	// attributes are present, or the event belongs to the other dialect.
	KindDialect
	// KindVersion: the dialect is known but its version is not supported.
	KindVersion
	// KindInvalid: well-formed JSON that breaks the dialect's envelope rules
	// (including a duplicate top-level member name).
	KindInvalid
)

var kindNames = [...]string{"", "syntax", "limit", "dialect", "version", "invalid"}

// String returns the kind's name ("syntax", "limit", ...). It is also the
// Code of an error whose dialect could not be determined.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Error is a refused event, as clients see it. Code is the dialect's own code
// (kebab-case for R, e.g. "invalid-event"; snake_case for D, e.g.
// "invalid_envelope"). When the dialect could not be determined (only
// possible through [Parse]) Dialect is DialectUnknown and Code is
// Kind.String().
type Error struct {
	Dialect   Dialect
	Kind      Kind
	Code      string
	Message   string // one lowercase sentence naming what is wrong
	Field     string // the offending top-level member's name, or ""
	Offset    int    // byte offset of a syntax or limit error, or -1
	Retryable bool   // D error model; always false for envelope errors
}

func (e *Error) Error() string {
	s := "aep: " + e.Code
	if e.Field != "" {
		s += " (" + e.Field + ")"
	}
	return s + ": " + e.Message
}

// AsError returns the *Error in err's chain, or nil.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// HTTPStatus is the status of the dialect's ingest binding for a request
// whose outcome this error decides (docs/dialects.md):
//
//   - R (AEP-0003 §3.2.3): 413 for a limit, 400 for everything else.
//   - D (transport-sse.md, Ingest Endpoint and Error Handling): 400 when the
//     bytes are not JSON (KindSyntax); otherwise 202, because D reports an
//     invalid event inside the 202 body's errors array and accepts the rest.
func (e *Error) HTTPStatus() int {
	switch e.Dialect {
	case DialectD:
		if e.Kind == KindSyntax {
			return http.StatusBadRequest
		}
		return http.StatusAccepted
	default:
		if e.Kind == KindLimit {
			return http.StatusRequestEntityTooLarge
		}
		return http.StatusBadRequest
	}
}

// AppendJSON appends the error object in the dialect's own shape:
//
//   - D (error-model.md): {"code":...,"message":...,"retryable":false,"details":{"field":...}}
//   - R (AEP-0003 §3.2.3): {"error":...,"detail":...,"field":...}
//
// "details"/"field" appear only when Field is set. A version error adds the
// supported versions: D "details.supported" (versioning.md, Implementation
// Notes), R "versions" (the shape of the 426 body, AEP-0003 §3.2.2). The HTTP handler embeds
// the D object as the "error" of an errors[] entry, and adds the failing line
// index to the R object (docs/dialects.md).
func (e *Error) AppendJSON(dst []byte) []byte {
	if e.Dialect == DialectD {
		dst = append(dst, `{"code":`...)
		dst = AppendJSONString(dst, e.Code)
		dst = append(dst, `,"message":`...)
		dst = AppendJSONString(dst, e.Message)
		dst = append(dst, `,"retryable":`...)
		dst = strconv.AppendBool(dst, e.Retryable)
		if e.Field != "" || e.Kind == KindVersion {
			dst = append(dst, `,"details":{`...)
			if e.Field != "" {
				dst = append(dst, `"field":`...)
				dst = AppendJSONString(dst, e.Field)
			}
			if e.Kind == KindVersion {
				if e.Field != "" {
					dst = append(dst, ',')
				}
				dst = appendVersions(append(dst, `"supported":`...), versionsD)
			}
			dst = append(dst, '}')
		}
		return append(dst, '}')
	}
	dst = append(dst, `{"error":`...)
	dst = AppendJSONString(dst, e.Code)
	dst = append(dst, `,"detail":`...)
	dst = AppendJSONString(dst, e.Message)
	if e.Field != "" {
		dst = append(dst, `,"field":`...)
		dst = AppendJSONString(dst, e.Field)
	}
	if e.Kind == KindVersion {
		dst = appendVersions(append(dst, `,"versions":`...), versionsR)
	}
	return append(dst, '}')
}

func appendVersions(dst []byte, vs []string) []byte {
	dst = append(dst, '[')
	for i, v := range vs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendJSONString(dst, v)
	}
	return append(dst, ']')
}

// failure is an error found before the dialect's vocabulary is applied.
type failure struct {
	kind  Kind
	field string
	msg   string
	off   int
}

func fail(k Kind, field, msg string) *failure {
	return &failure{kind: k, field: field, msg: msg, off: -1}
}

func failAt(k Kind, off int, msg string) *failure {
	return &failure{kind: k, msg: msg, off: off}
}

// toError expresses f in dialect d's vocabulary.
func (f *failure) toError(d Dialect) *Error {
	e := &Error{Dialect: d, Kind: f.kind, Field: f.field, Message: f.msg, Offset: f.off}
	if f.off >= 0 {
		e.Message += " at byte " + strconv.Itoa(f.off)
	}
	switch d {
	case DialectR:
		e.Code = CodeRInvalidEvent
		if f.kind == KindLimit {
			e.Code = CodeRLimitExceeded
		}
	case DialectD:
		switch f.kind {
		case KindLimit:
			e.Code = CodeDProtocolError
		case KindVersion:
			e.Code = CodeDUnsupportedVersion
		default:
			e.Code = CodeDInvalidEnvelope
		}
		if f.field == "type" && f.kind == KindInvalid {
			e.Code = CodeDInvalidEventType
		}
	default:
		e.Code = f.kind.String()
	}
	return e
}
