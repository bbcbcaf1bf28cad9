package dialectd

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/durable"
)

// deadLettered is the event.dead_lettered payload of a dead letter
// (reliability.md): the consumer's error (also when its last retryable
// rejection spent the attempts), or subscription_error when the attempts
// ran out unacknowledged, and the original event.
func deadLettered(dl durable.DeadLetter) aep.DDeadLettered {
	orig := json.RawMessage(dl.Event.Record.Value)
	if !json.Valid(orig) {
		orig = json.RawMessage("null")
	}
	last := aep.DError{Code: dl.Reason.Code, Message: dl.Reason.Message}
	if dl.Reason.Exhausted && dl.Reason.Code != "" {
		// the consumer's retryable rejection of the last attempt
		last.Message = fmt.Sprintf("attempts exhausted (%d); the last was rejected as retryable: %s", dl.Attempts, dl.Reason.Message)
	}
	if _, known := aep.LookupCode(aep.DialectD, last.Code); !known && last.Code != "" {
		// error-model.md: an unknown code is treated as protocol_error; the
		// consumer's own word stays readable in the message.
		last = aep.DError{Code: aep.CodeDProtocolError, Message: "unknown error code " + aep.QuoteTrunc(dl.Reason.Code) + ": " + last.Message}
	}
	if dl.Reason.Exhausted && dl.Reason.Code == "" {
		last = aep.DError{Code: aep.CodeDSubscriptionError, Message: fmt.Sprintf("not acknowledged after %d attempts", dl.Attempts)}
	}
	return aep.DDeadLettered{
		OriginalEventID: dl.Event.Attrs.ID, SubscriptionID: dl.SubscriptionID, Target: dl.Event.Attrs.Target, Attempts: dl.Attempts,
		LastAttemptAt: dl.At.UTC().Format(time.RFC3339Nano), LastError: last, OriginalEvent: orig,
	}
}

// encodeDeadLetter is the durable.DeadLetterCodec of dialect D: the record
// in the dead-letter topic is the event.dead_lettered envelope carrying the
// original event.
func encodeDeadLetter(dl durable.DeadLetter) ([]byte, error) {
	return aep.DNotice("event.dead_lettered", deadLettered(dl), dl.At)
}
