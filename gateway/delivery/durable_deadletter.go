package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/twmb/franz-go/pkg/kgo"
)

// deadLetteredD is the payload of event.dead_lettered (D reliability.md).
type deadLetteredD struct {
	OriginalEventID string          `json:"original_event_id"`
	SubscriptionID  string          `json:"subscription_id"`
	Attempts        int             `json:"attempts"`
	LastAttemptAt   string          `json:"last_attempt_at"`
	LastError       errorD          `json:"last_error"`
	OriginalEvent   json.RawMessage `json:"original_event"`
}

// noticeD builds a gateway-generated D envelope of type typ.
func noticeD(typ string, payload any, now time.Time) ([]byte, error) {
	return json.Marshal(struct {
		Version   string `json:"aep_version"`
		ID        string `json:"id"`
		Type      string `json:"type"`
		Source    string `json:"source"`
		CreatedAt string `json:"created_at"`
		Payload   any    `json:"payload"`
	}{"0.1", "evt_" + ulid.Make().String(), typ, "aep-gateway", now.UTC().Format(time.RFC3339Nano), payload})
}

// deadLetter writes the event.dead_lettered envelope of pe (carrying the
// original event) to the tenant's dead-letter topic, keyed and with headers
// as the original record plus aep-dl-subscription, and returns the
// envelope for the consumer.
func (s *DurableStream) deadLetter(ctx context.Context, pe *pendingD, now time.Time) ([]byte, *deadLetteredD, error) {
	orig := json.RawMessage(pe.ev.Record.Value)
	if !json.Valid(orig) {
		orig = json.RawMessage("null")
	}
	p := &deadLetteredD{
		OriginalEventID: pe.ev.Attrs.ID, SubscriptionID: s.req.SubscriptionID, Attempts: pe.attempts,
		LastAttemptAt: now.UTC().Format(time.RFC3339Nano), LastError: *pe.rejected, OriginalEvent: orig,
	}
	notice, err := noticeD("event.dead_lettered", p, now)
	if err != nil {
		return nil, nil, err
	}
	hdrs := append(append([]kgo.RecordHeader(nil), pe.ev.Record.Headers...),
		kgo.RecordHeader{Key: "aep-dl-subscription", Value: []byte(s.req.SubscriptionID)})
	rec := &kgo.Record{
		Topic: s.e.cfg.Naming.DeadLetter(s.req.Tenant), Key: pe.ev.Record.Key, Value: notice, Headers: hdrs,
	}
	if err := s.e.admCl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return nil, nil, fmt.Errorf("delivery: dead-letter %s: %w", pe.ev.Attrs.ID, err)
	}
	return notice, p, nil
}
