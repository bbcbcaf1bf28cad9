package bindingtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// How end reports a stream the gateway shut down, per binding.
const (
	closingSSED = "end of body"                  // D has no closing message on SSE
	closingSSER = "closing comment, end of body" // AEP-0003 §3.3
	closingWSD  = "close 1001"                   // transport-websocket.md: going away
	closingWSR  = "closing frame, close 1001"    // AEP-0003 §3.5 rule 4
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

// sseOptions are the client options of an SSE stream opened with o.
func sseOptions(o openOpts, hdr http.Header) gatewaytest.SSEOptions {
	so := gatewaytest.SSEOptions{Header: hdr, Buffer: o.ahead}
	if o.slow != nil {
		so.Client, so.Buffer = o.slow.Client(), 0
	}
	return so
}

func wsOptions(o openOpts) gatewaytest.WSOptions {
	wo := gatewaytest.WSOptions{Buffer: o.ahead}
	if o.slow != nil {
		wo.HTTPClient, wo.Buffer = o.slow.Client(), 0
	}
	return wo
}

// openSSE opens an SSE stream and reads up to its ": stream open" comment;
// it returns the stream and the messages before that comment.
func openSSE(t *testing.T, u string, o openOpts, hdr http.Header) (*gatewaytest.SSEStream, []gatewaytest.SSEMessage) {
	t.Helper()
	s := gatewaytest.MustOpenSSE(t, u, sseOptions(o, hdr))
	pre := s.Until("the stream-open comment", func(m gatewaytest.SSEMessage) bool { return m.Comment() == "stream open" })
	return s, pre[:len(pre)-1]
}

// tryOK sorts a TryNext error: nil is a message, a timeout is false, the
// end of the stream fails t.
func tryOK(t *testing.T, err error) bool {
	t.Helper()
	if errors.Is(err, gatewaytest.ErrEnded) {
		t.Fatal(err)
	}
	return err == nil
}

// sseEnd reads an SSE stream's rest and normalizes how it ended.
func sseEnd(t *testing.T, s *gatewaytest.SSEStream, d time.Duration, norm func(gatewaytest.SSEMessage) msg) ([]msg, string) {
	t.Helper()
	rest, err := s.End(d)
	if err != nil {
		return nil, "error: " + err.Error()
	}
	var out []msg
	how := "end of body"
	for i, m := range rest {
		if m.IsComment() && strings.HasPrefix(m.Comment(), "closing") {
			if i != len(rest)-1 {
				return nil, "closing comment before other messages"
			}
			how = "closing comment, end of body"
			continue
		}
		out = append(out, norm(m))
	}
	return out, how
}

// SSE-D: GET /aep/events.

type sseD struct {
	s *gatewaytest.SSEStream
	t *testing.T
}

func openSSED(t *testing.T, s *stack, o openOpts) stream {
	t.Helper()
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
	st, pre := openSSE(t, s.URL+"/aep/events?"+q.Encode(), o, hdr)
	if len(pre) != 0 {
		t.Fatalf("before the stream-open comment: %+v", pre)
	}
	return &sseD{s: st, t: t}
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
	return sseEnd(t, a.s, d, a.norm)
}

// WS-D: GET /aep, one subscription per connection.

type wsD struct {
	w *gatewaytest.WSD
}

func openWSD(t *testing.T, s *stack, o openOpts) stream {
	t.Helper()
	w := gatewaytest.DialWSD(t, gatewaytest.WSURL(s.URL, "/aep"), wsOptions(o))
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
	w.MustSubscribe("evt_suite_sub", string(b))
	return &wsD{w: w}
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
	return out, fmt.Sprintf("close %d", status)
}

// SSE-R: GET /stream.

type sseR struct {
	s       *gatewaytest.SSEStream
	t       *testing.T
	pending []msg // replay-exhausted comments before ": stream open"
}

func openSSER(t *testing.T, s *stack, o openOpts) stream {
	t.Helper()
	q := url.Values{}
	if o.session != "" {
		q.Set("filter", fmt.Sprintf(`{"session":[%q]}`, o.session))
	}
	hdr := http.Header{}
	if o.from != "" {
		hdr.Set("Last-Event-ID", o.from)
	}
	st, pre := openSSE(t, s.URL+"/stream?"+q.Encode(), o, hdr)
	a := &sseR{s: st, t: t}
	for _, m := range pre {
		a.pending = append(a.pending, a.norm(m))
	}
	return a
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
	w *gatewaytest.WSR
}

func openWSR(t *testing.T, s *stack, o openOpts) stream {
	t.Helper()
	w := gatewaytest.DialWSR(t, gatewaytest.WSURL(s.URL, "/socket"), gatewaytest.RConsumerHello, wsOptions(o))
	var rest []string
	if o.session != "" {
		rest = append(rest, fmt.Sprintf(`"filter":{"session":[%q]}`, o.session))
	}
	if o.from != "" {
		i := strings.LastIndexByte(o.from, ':')
		j := strings.LastIndexByte(o.from[:i], ':')
		rest = append(rest, fmt.Sprintf(`"from":[{"session":%q,"epoch":%s,"seq":%s}]`, o.from[:j], o.from[j+1:i], o.from[i+1:]))
	}
	w.Subscribe("suite", strings.Join(rest, ","))
	return &wsR{w: w}
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
		how = "closing frame, " + how
	}
	return out, how
}
