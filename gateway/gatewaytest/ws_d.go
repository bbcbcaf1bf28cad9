package gatewaytest

import (
	"encoding/json"
	"fmt"
	"testing"
)

// SubprotocolD is the WebSocket subprotocol of dialect D (transport-websocket.md).
const SubprotocolD = "aep-0.1"

// DEnvelope is a dialect D envelope received over a WebSocket, decoded
// loosely; Raw is the message as received.
type DEnvelope struct {
	Raw         []byte
	ID          string `json:"id"`
	Type        string `json:"type"`
	Source      string `json:"source"`
	SessionID   string `json:"session_id"`
	CausationID string `json:"causation_id"`
	Delivery    struct {
		Mode           string `json:"mode"`
		Sequence       uint64 `json:"sequence"`
		Cursor         string `json:"cursor"`
		SubscriptionID string `json:"subscription_id"`
	} `json:"delivery"`
	Payload map[string]any `json:"payload"`
}

// Str is the payload's string field key, "" when absent.
func (e DEnvelope) Str(key string) string { s, _ := e.Payload[key].(string); return s }

// ErrCode is payload.error.code, "" when absent.
func (e DEnvelope) ErrCode() string {
	m, _ := e.Payload["error"].(map[string]any)
	s, _ := m["code"].(string)
	return s
}

// Delivered says the envelope is an event delivered to a subscription.
func (e DEnvelope) Delivered() bool {
	return e.Delivery.Cursor != "" && e.Delivery.SubscriptionID != ""
}

// DecodeD decodes a dialect D envelope.
func DecodeD(b []byte) (DEnvelope, error) {
	e := DEnvelope{Raw: b}
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("not a D envelope: %w: %s", err, b)
	}
	return e, nil
}

// DControl is a dialect D control envelope a client sends (session and
// subscription messages) with a JSON payload.
func DControl(id, typ, payload string) string {
	return fmt.Sprintf(`{"aep_version":"0.1","id":%q,"type":%q,"source":"agent:gatewaytest","target":"harness:aep","created_at":"2026-07-09T10:00:00Z","payload":%s}`, id, typ, payload)
}

// WSD is a dialect D WebSocket session.
type WSD struct {
	*WSConn
}

// DialWSD connects with the aep-0.1 subprotocol (o.Subprotocols is
// ignored) and opens a session: session.opened answered by session.ready.
func DialWSD(tb testing.TB, url string, o WSOptions) *WSD {
	tb.Helper()
	o.Subprotocols = []string{SubprotocolD}
	w := &WSD{DialWS(tb, url, o)}
	if p := w.C.Subprotocol(); p != SubprotocolD {
		tb.Fatalf("subprotocol %q, want %s", p, SubprotocolD)
	}
	w.Send(DControl("evt_gatewaytest_open", "session.opened", `{"session_id":"sess_gatewaytest","version":"0.1"}`))
	if m := w.Next(); m.Type != "session.ready" || m.CausationID != "evt_gatewaytest_open" || m.Str("session_id") != "sess_gatewaytest" {
		tb.Fatalf("after session.opened: %s", m.Raw)
	}
	return w
}

// Next returns the next envelope.
func (w *WSD) Next() DEnvelope {
	w.tb.Helper()
	e, err := DecodeD(w.NextRaw())
	if err != nil {
		w.tb.Fatal(err)
	}
	return e
}

// Event returns the next envelope, which must be a delivered event.
func (w *WSD) Event() DEnvelope {
	w.tb.Helper()
	m := w.Next()
	if !m.Delivered() {
		w.tb.Fatalf("not a delivered event: %s", m.Raw)
	}
	return m
}

// Subscribe sends subscription.requested with the filter object and
// returns the answer (subscription.created or subscription.rejected),
// past the waiting notices (session.heartbeat) an attach to a durable
// subscription sends while it waits for the previous holder.
func (w *WSD) Subscribe(id, filter string) DEnvelope {
	w.tb.Helper()
	w.Send(DControl(id, "subscription.requested", filter))
	m := w.Next()
	for m.Type == "session.heartbeat" && m.Str("status") == "waiting" {
		m = w.Next()
	}
	if m.CausationID != id {
		w.tb.Fatalf("answer to %s: %s", id, m.Raw)
	}
	return m
}

// MustSubscribe is Subscribe requiring subscription.created; it returns
// the subscription_id.
func (w *WSD) MustSubscribe(id, filter string) string {
	w.tb.Helper()
	m := w.Subscribe(id, filter)
	if m.Type != "subscription.created" {
		w.tb.Fatalf("subscribe %s: %s", filter, m.Raw)
	}
	return m.Str("subscription_id")
}
