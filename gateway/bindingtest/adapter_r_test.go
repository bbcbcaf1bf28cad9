package bindingtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// (R events carry "aep", frames do not).
func parseR(t *testing.T, b []byte) (msg, bool) {
	t.Helper()
	var e struct {
		AEP     *string `json:"aep"`
		ID      string  `json:"id"`
		Session string  `json:"session"`
		Epoch   int     `json:"epoch"`
		Seq     int     `json:"seq"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("not JSON: %v: %s", err, b)
	}
	if e.AEP == nil {
		return msg{}, false
	}
	return msg{kind: kindEvent, id: e.ID, session: e.Session, seq: e.Seq, data: b, raw: string(b),
		token: fmt.Sprintf("%s:%d:%d", e.Session, e.Epoch, e.Seq)}, true
}

// exhaustedR normalizes a replay-exhausted marker's session and earliest
// position (nil: the log holds nothing of the session).
func exhaustedR(session string, earliest *[2]int64) string {
	if earliest == nil {
		return "session " + session
	}
	return fmt.Sprintf("session %s earliest %d:%d", session, earliest[0], earliest[1])
}

// SSE-R: GET /stream.

type sseR struct {
	s       *gatewaytest.SSEStream
	t       *testing.T
	pending []msg // replay-exhausted comments before ": stream open"
}

// sseRRequest is the URL and headers of an SSE-R stream opened with o.
func sseRRequest(s *stack, o openOpts) (string, http.Header) {
	q := url.Values{}
	if o.session != "" {
		q.Set("filter", fmt.Sprintf(`{"session":[%q]}`, o.session))
	}
	hdr := http.Header{}
	if o.from != "" {
		hdr.Set("Last-Event-ID", o.from)
	}
	return s.URL + "/stream?" + q.Encode(), hdr
}

func openSSER(t *testing.T, s *stack, o openOpts) stream {
	t.Helper()
	u, hdr := sseRRequest(s, o)
	st, pre := openSSE(t, u, o, hdr)
	a := &sseR{s: st, t: t}
	for _, m := range pre {
		a.pending = append(a.pending, a.norm(m))
	}
	return a
}

// refuseSSER opens a stream that must be refused: "status error".
func refuseSSER(t *testing.T, s *stack, o openOpts) string {
	t.Helper()
	u, hdr := sseRRequest(s, o)
	var body struct {
		Error  string `json:"error"`
		Detail string `json:"detail"`
	}
	status := refusedSSE(t, u, hdr, &body)
	if body.Detail == "" {
		t.Fatalf("refusal %d %s without a detail", status, body.Error)
	}
	return fmt.Sprintf("%d %s", status, body.Error)
}

func (a *sseR) norm(m gatewaytest.SSEMessage) msg {
	a.t.Helper()
	if m.IsComment() {
		c := m.Comment()
		if c == "ping" {
			return msg{kind: kindHeartbeat, raw: c}
		}
		if rest, ok := strings.CutPrefix(c, "replay-exhausted "); ok {
			session, at, _ := strings.Cut(rest, " ")
			var earliest *[2]int64
			if e, q, ok := strings.Cut(at, ":"); ok {
				ei, err1 := strconv.ParseInt(e, 10, 64)
				qi, err2 := strconv.ParseInt(q, 10, 64)
				if err1 != nil || err2 != nil {
					a.t.Fatalf("replay-exhausted comment %q", c)
				}
				earliest = &[2]int64{ei, qi}
			}
			return msg{kind: kindExhausted, gaps: []string{exhaustedR(session, earliest)}, raw: c}
		}
		return msg{kind: kindOther, raw: ": " + c}
	}
	out, ok := parseR(a.t, []byte(m.Data))
	if !ok {
		return msg{kind: kindOther, raw: m.Data}
	}
	if m.ID != out.token || m.Event != "tool.requested" {
		a.t.Fatalf("id %q event %q, want %q tool.requested", m.ID, m.Event, out.token)
	}
	return out
}

func (a *sseR) tryNext(t *testing.T, d time.Duration) (msg, bool) {
	t.Helper()
	if len(a.pending) > 0 {
		m := a.pending[0]
		a.pending = a.pending[1:]
		return m, true
	}
	m, err := a.s.TryNext(d)
	if !tryOK(t, err) {
		return msg{}, false
	}
	return a.norm(m), true
}

func (a *sseR) heartbeat(t *testing.T) {
	t.Helper()
	a.s.Until("a ping comment", func(m gatewaytest.SSEMessage) bool { return m.IsComment() && m.Comment() == "ping" })
}

func (a *sseR) end(t *testing.T, d time.Duration) ([]msg, string) {
	t.Helper()
	return sseEnd(t, a.s, d, a.norm)
}

// WS-R: GET /socket, one subscription per connection.

type wsR struct {
	w    *gatewaytest.WSR
	last string // token of the last event delivered, for the closing frame
}

// wsRSubscribe is the subscribe frame of a stream opened with o.
func wsRSubscribe(o openOpts) string {
	rest := []string{`"type":"subscribe","id":"suite"`}
	if o.session != "" {
		rest = append(rest, fmt.Sprintf(`"filter":{"session":[%q]}`, o.session))
	}
	if o.from != "" {
		i := strings.LastIndexByte(o.from, ':')
		j := strings.LastIndexByte(o.from[:i], ':')
		rest = append(rest, fmt.Sprintf(`"from":[{"session":%q,"epoch":%s,"seq":%s}]`, o.from[:j], o.from[j+1:i], o.from[i+1:]))
	}
	return "{" + strings.Join(rest, ",") + "}"
}

func openWSR(t *testing.T, s *stack, o openOpts) stream {
	t.Helper()
	w := gatewaytest.DialWSR(t, gatewaytest.WSURL(s.URL, "/socket"), gatewaytest.RConsumerHello, wsOptions(o))
	w.Send(wsRSubscribe(o))
	if f := w.Next(); f.Str("type") != "subscribed" || f.Str("id") != "suite" {
		t.Fatalf("got %v, want subscribed suite", f)
	}
	return &wsR{w: w}
}

// refuseWSR subscribes with what must be refused: "frame code".
func refuseWSR(t *testing.T, s *stack, o openOpts) string {
	t.Helper()
	w := gatewaytest.DialWSR(t, gatewaytest.WSURL(s.URL, "/socket"), gatewaytest.RConsumerHello, wsOptions(o))
	w.Send(wsRSubscribe(o))
	f := w.Next()
	if f.Str("id") != "suite" || f.Str("detail") == "" {
		t.Fatalf("refusal %v: want the subscription's id and a detail", f)
	}
	return f.Str("type") + " " + f.Str("code")
}

func (a *wsR) norm(t *testing.T, b []byte) msg {
	t.Helper()
	if m, ok := parseR(t, b); ok {
		return m
	}
	var f struct {
		Type     string `json:"type"`
		Session  string `json:"session"`
		Earliest *struct {
			Epoch, Seq int64
		} `json:"earliest"`
	}
	_ = json.Unmarshal(b, &f)
	switch f.Type {
	case "ping":
		return msg{kind: kindHeartbeat, raw: string(b)}
	case "replay-exhausted":
		var earliest *[2]int64
		if f.Earliest != nil {
			earliest = &[2]int64{f.Earliest.Epoch, f.Earliest.Seq}
		}
		return msg{kind: kindExhausted, gaps: []string{exhaustedR(f.Session, earliest)}, raw: string(b)}
	}
	return msg{kind: kindOther, raw: string(b)}
}

// tryNext answers a ping with its pong: a silent peer is closed after
// three ping periods.
func (a *wsR) tryNext(t *testing.T, d time.Duration) (msg, bool) {
	t.Helper()
	b, err := a.w.TryNext(d)
	if !tryOK(t, err) {
		return msg{}, false
	}
	m := a.norm(t, b)
	if m.kind == kindEvent {
		a.last = m.token
	}
	if m.kind == kindHeartbeat {
		var p struct {
			T json.RawMessage `json:"t"`
		}
		_ = json.Unmarshal(b, &p)
		a.w.Send(`{"type":"pong","t":` + string(p.T) + `}`)
	}
	return m, true
}

func (a *wsR) heartbeat(t *testing.T) {
	t.Helper()
	for next(t, a).kind != kindHeartbeat {
	}
}

// closingDelivered is the position a closing frame names as delivered on
// the suite's subscription, as a token ("" when it names none).
func closingDelivered(t *testing.T, b []byte) string {
	t.Helper()
	var f struct {
		Delivered []struct {
			Sub, Session string
			Epoch, Seq   int64
		}
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("closing frame %s: %v", b, err)
	}
	for _, d := range f.Delivered {
		if d.Sub == "suite" {
			return fmt.Sprintf("%s:%d:%d", d.Session, d.Epoch, d.Seq)
		}
	}
	return ""
}

func (a *wsR) end(t *testing.T, d time.Duration) ([]msg, string) {
	t.Helper()
	rest, status := a.w.End(d)
	var out []msg
	how := fmt.Sprintf("close %d", status)
	for i, b := range rest {
		if m := a.norm(t, b); m.kind != kindOther || !strings.HasPrefix(m.raw, `{"type":"closing"`) {
			out = append(out, m)
			continue
		}
		if i != len(rest)-1 {
			return nil, "closing frame before other messages"
		}
		if got := closingDelivered(t, b); got != a.last {
			return nil, fmt.Sprintf("closing frame names %q delivered, the last event was %q", got, a.last)
		}
		how = "closing frame, " + how
	}
	return out, how
}
