package dialectd

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
)

// A consumer's rejection with a code outside D's vocabulary is dead-lettered
// as protocol_error (error-model.md: unknown codes are treated as
// protocol_error), its own code kept in the message; a known code stays,
// and running out of attempts is subscription_error.
func TestDeadLetteredUnknownCodeIsProtocolError(t *testing.T) {
	ev := &engine.Event{Record: &kgo.Record{Value: []byte(`{"id":"evt_1"}`)}, Attrs: aep.Attrs{ID: "evt_1", Target: "agent:b"}}
	for _, c := range []struct {
		reason  durable.Rejection
		code    string
		message string
	}{
		{durable.Rejection{Code: "weird_new_code", Message: "nope"}, aep.CodeDProtocolError, `unknown error code "weird_new_code": nope`},
		{durable.Rejection{Code: "task_error", Message: "failed"}, "task_error", "failed"},
		{durable.Rejection{Exhausted: true}, aep.CodeDSubscriptionError, "not acknowledged after 3 attempts"},
	} {
		got := deadLettered(durable.DeadLetter{SubscriptionID: "sub_1", Event: ev, Attempts: 3, At: time.Now(), Reason: c.reason})
		if got.LastError.Code != c.code || got.LastError.Message != c.message {
			t.Errorf("%+v: last_error %+v, want %s %q", c.reason, got.LastError, c.code, c.message)
		}
		if got.Target != "agent:b" {
			t.Errorf("target %q", got.Target)
		}
	}
}
