package gateway

import (
	"errors"
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

// inLog words whether an event that failed with err may be in the log:
// "unknown" (retry with the same id) or "no".
func inLog(err error) string {
	if mayBeInLog(err) {
		return "unknown"
	}
	return "no"
}

// rejectedWrite counts and logs n events the log did not take: reason
// "broker-down" when refused at once (the broker is known to be down,
// nothing sent; logged at debug, one line per request would flood the log
// in an outage), "in-doubt" when they may be in the log, else "kafka".
func (s *Server) rejectedWrite(d aep.Dialect, tenant string, err error, n int) {
	switch {
	case errors.Is(err, ErrBrokerUnavailable):
		s.metrics.rejected(d, "broker-down", n)
		s.log.Debug().Err(err).Str("tenant", tenant).Int("failed", n).Msg("ingest refused: broker down")
		return
	case mayBeInLog(err):
		s.metrics.rejected(d, "in-doubt", n)
	default:
		s.metrics.rejected(d, "kafka", n)
	}
	s.log.Error().Err(err).Str("tenant", tenant).Int("failed", n).Msg("ingest write failed")
}
