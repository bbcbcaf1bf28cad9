package cursor

import (
	"errors"
	"fmt"
)

// Code is the stable, client-visible classification of a cursor or position
// that could not be used. The gateway maps it onto each dialect's error
// vocabulary (R kebab-case, D snake_case); the strings here are the D form.
type Code string

const (
	CodeMalformed     Code = "invalid_cursor"         // not base64url, wrong shape
	CodeTruncated     Code = "invalid_cursor"         // cut short: same client code, distinct sentinel
	CodeVersion       Code = "unsupported_cursor"     // a version this server does not read
	CodeForged        Code = "invalid_cursor"         // signature does not verify
	CodeForeignTenant Code = "cursor_tenant_mismatch" // signed for another tenant
	CodeUnknownKey    Code = "cursor_key_retired"     // signed by a key no longer accepted
)

// Sentinel errors. Every error returned by Keyring.Decode and ParsePosition
// wraps exactly one of them, so callers classify with errors.Is.
var (
	ErrMalformed     = errors.New("cursor: malformed")
	ErrTruncated     = errors.New("cursor: truncated")
	ErrVersion       = errors.New("cursor: unknown version")
	ErrForged        = errors.New("cursor: signature mismatch")
	ErrForeignTenant = errors.New("cursor: signed for another tenant")
	ErrUnknownKey    = errors.New("cursor: unknown signing key")
)

// Error is a decoding failure: a stable Code, the sentinel it wraps (Err),
// and a human detail that never echoes secret material.
type Error struct {
	Code   Code
	Err    error
	Detail string
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return e.Err.Error()
	}
	return e.Err.Error() + ": " + e.Detail
}

// Unwrap returns the sentinel, so errors.Is(err, ErrForged) works.
func (e *Error) Unwrap() error { return e.Err }

func errf(sentinel error, format string, args ...any) error {
	code := CodeMalformed
	switch sentinel {
	case ErrTruncated:
		code = CodeTruncated
	case ErrVersion:
		code = CodeVersion
	case ErrForged:
		code = CodeForged
	case ErrForeignTenant:
		code = CodeForeignTenant
	case ErrUnknownKey:
		code = CodeUnknownKey
	}
	return &Error{Code: code, Err: sentinel, Detail: fmt.Sprintf(format, args...)}
}
