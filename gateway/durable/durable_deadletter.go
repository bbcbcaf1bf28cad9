package durable

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Rejection is why an event is dead-lettered: the consumer rejected it
// (Code and Message as the consumer sent them), or its attempts ran out
// (Exhausted; Code and Message are empty and the binding words them, or
// the consumer's last retryable rejection).
//
// A consumer's rejection marked Retryable is not final: the event is
// redelivered after the policy's backoff, counting an attempt, and
// dead-lettered with that error once its attempts run out. Retryable is
// never stored in a checkpoint (only final rejections are).
type Rejection struct {
	Code      string
	Message   string
	Exhausted bool
	Retryable bool `json:"-"`
}

// DeadLetter is one event a durable stream dead-letters.
type DeadLetter struct {
	SubscriptionID string
	Event          *Event
	Attempts       int       // hand-overs to a client (DurableStream.Handed)
	At             time.Time // the last attempt's end
	Reason         Rejection
}

// DeadLetterCodec encodes a DeadLetter as the record value written to the
// tenant's dead-letter topic; the same bytes reach the consumer as the
// DurableDelivery's Notice. The binding supplies it (its dialect decides
// the shape). It is called from the stream's goroutine.
type DeadLetterCodec func(DeadLetter) ([]byte, error)

// deadLetter writes pe's dead letter to the tenant's dead-letter topic,
// keyed and with headers as the original record plus aep-dl-subscription,
// and returns it with its encoding.
func (s *DurableStream) deadLetter(ctx context.Context, pe *pending, now time.Time) ([]byte, *DeadLetter, error) {
	dl := &DeadLetter{SubscriptionID: s.req.SubscriptionID, Event: pe.ev, Attempts: pe.handed, At: now, Reason: *pe.rejected}
	value, err := s.req.DeadLetter(*dl)
	if err != nil {
		return nil, nil, fmt.Errorf("durable: encode dead letter %s: %w", pe.ev.Attrs.ID, err)
	}
	hdrs := append(append([]kgo.RecordHeader(nil), pe.ev.Record.Headers...),
		kgo.RecordHeader{Key: "aep-dl-subscription", Value: []byte(s.req.SubscriptionID)})
	rec := &kgo.Record{
		Topic: s.e.cfg.Naming.DeadLetter(s.req.Tenant.String()), Key: pe.ev.Record.Key, Value: value, Headers: hdrs,
	}
	if err := s.e.admCl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return nil, nil, fmt.Errorf("durable: dead-letter %s: %w", pe.ev.Attrs.ID, err)
	}
	return value, dl, nil
}
