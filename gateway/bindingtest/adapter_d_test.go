package bindingtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// parseD normalizes a delivered dialect D event or notice (the SSE data or
// the WebSocket message).
func parseD(t *testing.T, b []byte) msg {
	t.Helper()
	var d struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Session  string `json:"session_id"`
		Delivery *struct {
			Cursor string `json:"cursor"`
		} `json:"delivery"`
		Payload struct {
			Seq      *int   `json:"seq"`
			ToCursor string `json:"to_cursor"`
			Gaps     []struct {
				Partition int32  `json:"partition"`
				Requested int64  `json:"requested"`
				RestartAt int64  `json:"restart_at"`
				Reason    string `json:"reason"`
			} `json:"gaps"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("not a D envelope: %v: %s", err, b)
	}
	m := msg{kind: kindOther, id: d.ID, session: d.Session, data: b, raw: string(b)}
	switch {
	case d.Type == "event.replayed":
		m.kind, m.token = kindReplayed, d.Payload.ToCursor
		for _, g := range d.Payload.Gaps {
			m.gaps = append(m.gaps, fmt.Sprintf("partition %d requested %d restart_at %d %s", g.Partition, g.Requested, g.RestartAt, g.Reason))
		}
	case d.Delivery != nil && d.Payload.Seq != nil:
		m.kind, m.seq, m.token = kindEvent, *d.Payload.Seq, d.Delivery.Cursor
	}
	return m
}

// parseR normalizes a dialect R event; ok is false for a control frame
// SSE-D: GET /aep/events.

type sseD struct {
	s *gatewaytest.SSEStream
	t *testing.T
}

// sseDRequest is the URL and headers of an SSE-D stream opened with o.
func sseDRequest(s *stack, o openOpts) (string, http.Header) {
	q := url.Values{"types": {"*"}}
	if o.session != "" {
		q.Set("session_id", o.session)
	}
	if o.lossless || o.from != "" {
		q.Set("delivery_mode", "replayable")
	}
	hdr := http.Header{}
	if o.from != "" {
		hdr.Set("Last-Event-ID", o.from)
	}
	return s.URL + "/aep/events?" + q.Encode(), hdr
}

func openSSED(t *testing.T, s *stack, o openOpts) stream {
	t.Helper()
	u, hdr := sseDRequest(s, o)
	st, pre := openSSE(t, u, o, hdr)
	if len(pre) != 0 {
		t.Fatalf("before the stream-open comment: %+v", pre)
	}
	return &sseD{s: st, t: t}
}

// refuseSSED opens a stream that must be refused: "status error.code".
func refuseSSED(t *testing.T, s *stack, o openOpts) string {
	t.Helper()
	u, hdr := sseDRequest(s, o)
	var body struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	status := refusedSSE(t, u, hdr, &body)
	return fmt.Sprintf("%d %s", status, body.Error.Code)
}

func (a *sseD) norm(m gatewaytest.SSEMessage) msg {
	a.t.Helper()
	if m.IsComment() {
		if m.Comment() == "heartbeat" {
			return msg{kind: kindHeartbeat, raw: m.Comment()}
		}
		return msg{kind: kindOther, raw: ": " + m.Comment()}
	}
	out := parseD(a.t, []byte(m.Data))
	if out.kind == kindEvent && (m.ID != out.token || m.Event != "task.progress") {
		a.t.Fatalf("id %q event %q, want the delivery.cursor and the type: %s", m.ID, m.Event, m.Data)
	}
	if out.kind == kindReplayed && (m.ID != out.token || m.Event != "event.replayed") {
		a.t.Fatalf("id %q event %q, want to_cursor and event.replayed: %s", m.ID, m.Event, m.Data)
	}
	return out
}

func (a *sseD) tryNext(t *testing.T, d time.Duration) (msg, bool) {
	t.Helper()
	m, err := a.s.TryNext(d)
	if !tryOK(t, err) {
		return msg{}, false
	}
	return a.norm(m), true
}

func (a *sseD) heartbeat(t *testing.T) {
	t.Helper()
	a.s.Until("a heartbeat comment", func(m gatewaytest.SSEMessage) bool { return m.IsComment() && m.Comment() == "heartbeat" })
}

func (a *sseD) end(t *testing.T, d time.Duration) ([]msg, string) {
	t.Helper()
	rest, how := sseEnd(t, a.s, d, a.norm)
	return dShutdownNotice(t, rest, how)
}

// dShutdownNotice takes a D stream's last message off rest when it is the
// subscription.expired of a shutdown (reason shutdown, a cursor, retryable)
// and says so in how.
func dShutdownNotice(t *testing.T, rest []msg, how string) ([]msg, string) {
	t.Helper()
	if len(rest) == 0 {
		return rest, how
	}
	var n struct {
		Type    string `json:"type"`
		Payload struct {
			Reason string `json:"reason"`
			Cursor string `json:"cursor"`
			Error  struct {
				Retryable bool `json:"retryable"`
			} `json:"error"`
		} `json:"payload"`
	}
	last := rest[len(rest)-1]
	if json.Unmarshal([]byte(last.raw), &n) != nil || n.Type != "subscription.expired" {
		return rest, how
	}
	if n.Payload.Reason != "shutdown" || n.Payload.Cursor == "" || !n.Payload.Error.Retryable {
		t.Fatalf("a shutdown's subscription.expired without reason shutdown, its cursor or retryable: %s", last.raw)
	}
	return rest[:len(rest)-1], "subscription.expired, " + how
}

// WS-D: GET /aep, one subscription per connection.

type wsD struct {
	w *gatewaytest.WSD
}

// wsDFilter is the subscription.requested payload of a stream opened with o.
func wsDFilter(o openOpts) string {
	filter := map[string]string{"types": "*"}
	if o.session != "" {
		filter["session_id"] = o.session
	}
	if o.lossless {
		filter["delivery_mode"] = "replayable"
	}
	if o.from != "" {
		filter["from_cursor"] = o.from
	}
	b, _ := json.Marshal(filter)
	return string(b)
}

func openWSD(t *testing.T, s *stack, o openOpts) stream {
	t.Helper()
	w := gatewaytest.DialWSD(t, gatewaytest.WSURL(s.URL, "/aep"), wsOptions(o))
	w.MustSubscribe("evt_suite_sub", wsDFilter(o))
	return &wsD{w: w}
}

// refuseWSD subscribes with what must be refused: "answer error.code".
func refuseWSD(t *testing.T, s *stack, o openOpts) string {
	t.Helper()
	w := gatewaytest.DialWSD(t, gatewaytest.WSURL(s.URL, "/aep"), wsOptions(o))
	m := w.Subscribe("evt_suite_sub", wsDFilter(o))
	return m.Type + " " + m.ErrCode()
}

func (a *wsD) tryNext(t *testing.T, d time.Duration) (msg, bool) {
	t.Helper()
	b, err := a.w.TryNext(d)
	if !tryOK(t, err) {
		return msg{}, false
	}
	return parseD(t, b), true
}

func (a *wsD) heartbeat(t *testing.T) {
	t.Helper()
	gatewaytest.Poll(t, "a WebSocket ping", func() bool { return a.w.Pings() > 0 })
}

func (a *wsD) end(t *testing.T, d time.Duration) ([]msg, string) {
	t.Helper()
	rest, status := a.w.End(d)
	var out []msg
	for _, b := range rest {
		out = append(out, parseD(t, b))
	}
	return dShutdownNotice(t, out, fmt.Sprintf("close %d", status))
}
