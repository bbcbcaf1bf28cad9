package dialectd

import (
	"errors"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/filtering"
)

func FuzzParseCreate(f *testing.F) {
	f.Add([]byte(`{"type":"subscription.requested","payload":{"types":["task.*"],"expires_at":"2999-01-01T00:00:00Z","ack_timeout_ms":1000,"max_attempts":5}}`))
	f.Add([]byte(`{"types":"task.*","delivery_mode":"replayable"}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"type":"subscription.requested","payload":null}`))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		fl, def, err := parseCreate(body, now)
		if err != nil {
			var fe *filtering.Error
			if !errors.As(err, &fe) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		if fl == nil || def.DeliveryMode != ModeAtLeastOnce || (def.ExpiresAt != nil && !def.ExpiresAt.After(now)) {
			t.Fatalf("accepted %q as %+v", body, def)
		}
		if _, err := filtering.ParseD(def.Filter); err != nil {
			t.Fatalf("stored filter %s does not parse: %v", def.Filter, err)
		}
	})
}

func FuzzParseAcks(f *testing.F) {
	f.Add([]byte(`[{"type":"event.acknowledged","payload":{"acknowledged_event_id":"evt_1"}},{"type":"event.rejected","payload":{"acknowledged_event_id":"evt_2","error":{"code":"x","message":"y","retryable":false}}}]`))
	f.Add([]byte(`{"type":"event.acknowledged","payload":{}}`))
	f.Add([]byte(`[1,"a",null]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		items, res, err := parseAcks(body)
		if err != nil {
			return
		}
		if len(items) != len(res) {
			t.Fatalf("%d items, %d results", len(items), len(res))
		}
		for i, it := range items {
			valid := it.Type != ""
			if valid == (res[i].Result == "invalid") || (valid && it.Payload.AcknowledgedEventID == "") {
				t.Fatalf("item %d: %+v result %+v", i, it, res[i])
			}
		}
	})
}
