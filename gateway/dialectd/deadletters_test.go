package dialectd_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/dialectd"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// deadLetters is the answer of GET /aep/dead-letters.
type deadLetters struct {
	DeadLetters []struct {
		Partition int32     `json:"partition"`
		Offset    int64     `json:"offset"`
		Time      time.Time `json:"time"`
		Event     struct {
			Type    string `json:"type"`
			Payload struct {
				OriginalEventID string                `json:"original_event_id"`
				SubscriptionID  string                `json:"subscription_id"`
				Target          *string               `json:"target"`
				Attempts        int                   `json:"attempts"`
				LastError       struct{ Code string } `json:"last_error"`
				OriginalEvent   struct{ Type string } `json:"original_event"`
			} `json:"payload"`
		} `json:"event"`
	} `json:"dead_letters"`
	Limit int `json:"limit"`
}

func (e *sseEnv) deadLetters(path string) deadLetters {
	e.t.Helper()
	code, b := e.do(http.MethodGet, path, "")
	var out deadLetters
	if err := json.Unmarshal(b, &out); code != http.StatusOK || err != nil {
		e.t.Fatalf("GET %s: %d %s (%v)", path, code, b, err)
	}
	return out
}

// GET /aep/dead-letters lists the newest records of the tenant's
// dead-letter topic, newest first, bounded by limit; other tenants see
// none; bad limits and methods are refused with their codes.
func TestDeadLettersEndpoint(t *testing.T) {
	e := newSubsEnv(t, dialectd.SubscriptionsConfig{CommitInterval: 20 * time.Millisecond})
	if got := e.deadLetters("/aep/dead-letters"); len(got.DeadLetters) != 0 || got.Limit != dialectd.DefaultDeadLetters {
		t.Fatalf("before any: %+v", got)
	}
	for _, q := range []string{"limit=0", "limit=101", "limit=x", "limit=-1"} {
		if code, b := e.do(http.MethodGet, "/aep/dead-letters?"+q, ""); code != http.StatusBadRequest || !strings.Contains(string(b), `"code":"protocol_error"`) {
			t.Errorf("%s: %d %s", q, code, b)
		}
	}
	if code, b := e.do(http.MethodPost, "/aep/dead-letters", "{}"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d %s", code, b)
	}

	code, b := e.do(http.MethodPost, "/aep/subscriptions", `{"types":["task.*"],"ack_timeout_ms":3600000}`)
	var created struct {
		ID string `json:"subscription_id"`
	}
	if code != http.StatusCreated || json.Unmarshal(b, &created) != nil {
		t.Fatalf("create: %d %s", code, b)
	}
	// evt_c names a target: reliability.md's dead-letter payload carries it
	targeted := strings.Replace(dEvent("evt_c", "task.updated", "s1"), `"session_id"`, `"target":"agent:reviewer","session_id"`, 1)
	e.ingest(dEvent("evt_a", "task.updated", "s1"), dEvent("evt_b", "task.updated", "s1"), targeted)
	s := e.openPath("/aep/subscriptions/" + created.ID + "/stream")
	defer s.Close()
	for range 3 {
		s.event()
	}
	// one partition (one session): evt_a is written before evt_c
	for _, id := range []string{"evt_a", "evt_c"} {
		if code, b := e.do(http.MethodPost, "/aep/subscriptions/"+created.ID+"/acks", ackBody("event.rejected", id)); code != http.StatusOK {
			t.Fatalf("reject %s: %d %s", id, code, b)
		}
		if m := s.next(); m.Event != "event.dead_lettered" {
			t.Fatalf("want the dead-letter notice of %s, got %+v", id, m)
		}
	}
	var got deadLetters
	gatewaytest.Poll(t, "two dead letters listed", func() bool {
		got = e.deadLetters("/aep/dead-letters")
		return len(got.DeadLetters) == 2
	})
	for i, want := range []string{"evt_c", "evt_a"} {
		d := got.DeadLetters[i]
		p := d.Event.Payload
		if d.Event.Type != "event.dead_lettered" || p.OriginalEventID != want || p.SubscriptionID != created.ID ||
			p.LastError.Code != "task_error" || p.OriginalEvent.Type != "task.updated" || p.Attempts != 1 || d.Time.IsZero() {
			t.Errorf("entry %d: want %s, got %+v", i, want, d)
		}
		if tg := p.Target; (want == "evt_c") != (tg != nil && *tg == "agent:reviewer") {
			t.Errorf("entry %d (%s): target %v, want agent:reviewer on evt_c only", i, want, tg)
		}
	}
	if one := e.deadLetters("/aep/dead-letters?limit=1"); len(one.DeadLetters) != 1 || one.DeadLetters[0].Event.Payload.OriginalEventID != "evt_c" || one.Limit != 1 {
		t.Errorf("limit=1: %+v", one)
	}
	if other := e.deadLetters("/other/dead-letters"); len(other.DeadLetters) != 0 {
		t.Errorf("another tenant sees %+v", other)
	}
}
