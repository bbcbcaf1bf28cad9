package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/aep-gateway/aep-gateway/aep"
)

// item is one thing read from a stream: an event (Data set) or a note for
// stderr (Note set).
type item struct {
	Type string // the event's type (the SSE event: field, or the frame's "type")
	ID   string // the SSE id: of the message, "" on WebSocket
	Data []byte // the event's JSON
	Note string // a remark about the stream (replay-exhausted, closing)
}

// source is an open stream of one dialect over one transport. Next blocks
// until an item arrives, the stream ends (io.EOF) or ctx is done. A source
// is owned by one goroutine; Close may be called once after the last Next.
type source interface {
	Next(ctx context.Context) (item, error)
	Close() error
}

// streamSpec says what to open.
type streamSpec struct {
	Dialect   aep.Dialect
	Transport string // "sse" or "ws"
	// Dialect D: the seed 000 filter members and the carried ones.
	DFilter map[string][]string // types, source, target, topic, session_id, conversation_id, task_id
	Mode    string              // delivery_mode: "", best_effort, replayable
	Cursor  string              // from_cursor
	// Dialect R.
	RFilter json.RawMessage // attr-match object; nil means {}
	From    json.RawMessage // JSON array of positions or the string "all"; nil means live
	Capture string
}

// dFilterKeys are the D filter members in the order they are sent.
var dFilterKeys = []string{"types", "source", "target", "topic", "session_id", "conversation_id", "task_id"}

// openStream opens spec on the gateway.
func openStream(ctx context.Context, c *Client, spec streamSpec) (source, error) {
	switch {
	case spec.Dialect == aep.DialectD && spec.Transport == "sse":
		q := url.Values{}
		for _, k := range dFilterKeys {
			if v := spec.DFilter[k]; len(v) > 0 {
				q.Set(k, strings.Join(v, ","))
			}
		}
		if spec.Mode != "" {
			q.Set("delivery_mode", spec.Mode)
		}
		if spec.Cursor != "" {
			q.Set("from_cursor", spec.Cursor)
		}
		return openSSESource(ctx, c, "/aep/events?"+q.Encode())
	case spec.Dialect == aep.DialectR && spec.Transport == "sse":
		q := url.Values{}
		if spec.RFilter != nil {
			q.Set("filter", string(spec.RFilter))
		}
		if spec.From != nil {
			if string(spec.From) == `"all"` {
				q.Set("from", "all")
			} else {
				q.Set("from", string(spec.From))
			}
		}
		if spec.Capture != "" {
			q.Set("capture", spec.Capture)
		}
		return openSSESource(ctx, c, "/stream?"+q.Encode())
	case spec.Dialect == aep.DialectD:
		return openWSD(ctx, c, spec)
	default:
		return openWSR(ctx, c, spec)
	}
}

// sseSource reads an SSE stream of either dialect.
type sseSource struct {
	resp *http.Response
	r    *sseReader
}

func openSSESource(ctx context.Context, c *Client, path string) (*sseSource, error) {
	resp, err := c.openSSE(ctx, path)
	if err != nil {
		return nil, err
	}
	return &sseSource{resp: resp, r: newSSEReader(resp.Body)}, nil
}

func (s *sseSource) Next(ctx context.Context) (item, error) {
	for {
		m, err := s.r.Next()
		if err != nil {
			if ctx.Err() != nil {
				return item{}, ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				return item{}, io.EOF
			}
			return item{}, fmt.Errorf("read stream: %w", err)
		}
		switch {
		case strings.HasPrefix(m.Comment, "replay-exhausted"), strings.HasPrefix(m.Comment, "closing"):
			return item{Note: m.Comment}, nil
		case m.Comment != "" || len(m.Data) == 0:
			continue // stream open, heartbeat, ping
		}
		return item{Type: m.Event, ID: m.ID, Data: m.Data}, nil
	}
}

func (s *sseSource) Close() error { return s.resp.Body.Close() }

// wsSetupTimeout bounds a WebSocket's handshake messages (hello or
// session.opened, then the subscription's answer).
const wsSetupTimeout = 30 * time.Second

// dialWS opens a WebSocket to path with the bearer token.
func dialWS(ctx context.Context, c *Client, path string, subprotocols []string) (*websocket.Conn, error) {
	u, err := c.wsURL(path)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	if c.Token != "" {
		h.Set("Authorization", "Bearer "+c.Token)
	}
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.HTTP, HTTPHeader: h, Subprotocols: subprotocols})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil {
			return nil, fmt.Errorf("WebSocket %s: %w", path, apiErrorFrom(resp))
		}
		return nil, fmt.Errorf("WebSocket %s: %w", path, err)
	}
	conn.SetReadLimit(maxSSELine)
	return conn, nil
}

// frame is the part of a WebSocket message of either dialect aepctl reads.
type frame struct {
	Type    string          `json:"type"`
	ID      json.RawMessage `json:"id"`
	Code    string          `json:"code"`   // R error
	Detail  string          `json:"detail"` // R error
	Payload json.RawMessage `json:"payload"`
	T       json.RawMessage `json:"t"` // R ping
	Reason  string          `json:"reason"`
	Session string          `json:"session"`
	Cause   string          `json:"cause"` // R: the command a refusal or an ack answers
}

func readFrame(ctx context.Context, conn *websocket.Conn) (frame, []byte, error) {
	_, b, err := conn.Read(ctx)
	if err != nil {
		return frame{}, nil, err
	}
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		return frame{}, nil, fmt.Errorf("a WebSocket message is not JSON: %.200q", b)
	}
	return f, b, nil
}

// wsEnd maps the error that ended a WebSocket read: ctx's error, io.EOF
// for a normal or going-away close, else the error.
func wsEnd(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case websocket.CloseStatus(err) == websocket.StatusNormalClosure, websocket.CloseStatus(err) == websocket.StatusGoingAway:
		return io.EOF
	}
	return fmt.Errorf("read WebSocket: %w", err)
}

func writeJSONFrame(ctx context.Context, conn *websocket.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return conn.Write(ctx, websocket.MessageText, b)
}

// errRefused marks a subscription the gateway refused in-band over a
// WebSocket: retrying would get the same answer.
var errRefused = errors.New("refused")

// dErrorPayload is the error member of D's rejection payloads.
type dErrorPayload struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Retryable bool   `json:"retryable"`
	} `json:"error"`
	Reason string `json:"reason"`
	Cursor string `json:"cursor"`
}

func (p dErrorPayload) String() string {
	s := strings.TrimSpace(p.Error.Code + ": " + p.Error.Message)
	if p.Reason != "" {
		s = p.Reason + " " + s
	}
	return strings.Trim(s, ": ")
}

// wsDSource is dialect D over WebSocket: a session with one subscription.
type wsDSource struct {
	conn   *websocket.Conn
	cursor string // subscription.created's starting cursor
}

func openWSD(ctx context.Context, c *Client, spec streamSpec) (*wsDSource, error) {
	conn, err := dialWS(ctx, c, "/aep", []string{"aep-0.1"})
	if err != nil {
		return nil, err
	}
	s := &wsDSource{conn: conn}
	session := "sess_aepctl_" + strings.ToLower(newDEnvelope("", "", nil).ID[4:])
	hctx, cancel := context.WithTimeout(ctx, wsSetupTimeout)
	defer cancel()
	if err := s.handshake(hctx, session, spec); err != nil {
		conn.CloseNow()
		return nil, err
	}
	return s, nil
}

func (s *wsDSource) handshake(ctx context.Context, session string, spec streamSpec) error {
	if err := writeJSONFrame(ctx, s.conn, newDEnvelope("session.opened", session, map[string]string{"session_id": session, "version": "0.1"})); err != nil {
		return fmt.Errorf("WebSocket: %w", err)
	}
	if err := s.await(ctx, "session.ready", "session.error"); err != nil {
		return err
	}
	filter := map[string]any{}
	for _, k := range dFilterKeys {
		if v := spec.DFilter[k]; len(v) > 0 {
			filter[k] = v
		}
	}
	if spec.Mode != "" {
		filter["delivery_mode"] = spec.Mode
	}
	if spec.Cursor != "" {
		filter["from_cursor"] = spec.Cursor
	}
	if err := writeJSONFrame(ctx, s.conn, newDEnvelope("subscription.requested", session, filter)); err != nil {
		return fmt.Errorf("WebSocket: %w", err)
	}
	return s.await(ctx, "subscription.created", "subscription.rejected")
}

// await reads until a message of type ok (nil) or refused (its error).
func (s *wsDSource) await(ctx context.Context, ok, refused string) error {
	for {
		f, _, err := readFrame(ctx, s.conn)
		if err != nil {
			return fmt.Errorf("WebSocket, waiting for %s: %w", ok, err)
		}
		var p dErrorPayload
		_ = json.Unmarshal(f.Payload, &p)
		switch f.Type {
		case ok:
			s.cursor = p.Cursor
			return nil
		case refused, "session.error":
			return fmt.Errorf("%s: %s (%w)", f.Type, p, errRefused)
		}
	}
}

func (s *wsDSource) Next(ctx context.Context) (item, error) {
	for {
		f, b, err := readFrame(ctx, s.conn)
		if err != nil {
			return item{}, wsEnd(ctx, err)
		}
		var p dErrorPayload
		switch f.Type {
		case "session.error", "subscription.expired":
			_ = json.Unmarshal(f.Payload, &p)
			return item{}, fmt.Errorf("%s: %s", f.Type, p)
		case "subscription.cancelled":
			return item{}, io.EOF
		case "session.ready", "capabilities.declared", "session.heartbeat":
			continue
		}
		return item{Type: f.Type, Data: b}, nil
	}
}

func (s *wsDSource) Close() error {
	return s.conn.Close(websocket.StatusNormalClosure, "aepctl done")
}

// wsRSource is dialect R over WebSocket (AEP-0003 §3.5): a consumer hello
// and one subscription.
type wsRSource struct {
	conn *websocket.Conn
}

const wsRSubID = "aepctl"

func openWSR(ctx context.Context, c *Client, spec streamSpec) (*wsRSource, error) {
	conn, err := dialWS(ctx, c, "/socket", nil)
	if err != nil {
		return nil, err
	}
	s := &wsRSource{conn: conn}
	hctx, cancel := context.WithTimeout(ctx, wsSetupTimeout)
	defer cancel()
	if err := s.handshake(hctx, spec); err != nil {
		conn.CloseNow()
		return nil, err
	}
	return s, nil
}

// rHello is a dialect R hello of role, identity agent.
func rHello(role, agent string) map[string]any {
	return map[string]any{"type": "hello", "versions": []string{"0.1"}, "role": role, "identity": map[string]string{"agent": agent}}
}

// sayHelloR sends hello and waits for the relay's hello.
func sayHelloR(ctx context.Context, conn *websocket.Conn, hello any) error {
	if err := writeJSONFrame(ctx, conn, hello); err != nil {
		return fmt.Errorf("WebSocket: %w", err)
	}
	return awaitR(ctx, conn, "hello")
}

func (s *wsRSource) handshake(ctx context.Context, spec streamSpec) error {
	if err := sayHelloR(ctx, s.conn, rHello("consumer", "aepctl")); err != nil {
		return err
	}
	return subscribeR(ctx, s.conn, wsRSubID, spec)
}

// subscribeR sends the subscribe frame of spec and waits for subscribed.
func subscribeR(ctx context.Context, conn *websocket.Conn, id string, spec streamSpec) error {
	sub := map[string]any{"type": "subscribe", "id": id}
	if spec.RFilter != nil {
		sub["filter"] = spec.RFilter
	}
	if spec.From != nil {
		sub["from"] = spec.From
	}
	if spec.Capture != "" {
		sub["capture"] = spec.Capture
	}
	if err := writeJSONFrame(ctx, conn, sub); err != nil {
		return fmt.Errorf("WebSocket: %w", err)
	}
	return awaitR(ctx, conn, "subscribed")
}

// awaitR reads dialect R frames until one of type ok, answering pings; an
// error frame is errRefused.
func awaitR(ctx context.Context, conn *websocket.Conn, ok string) error {
	for {
		f, _, err := readFrame(ctx, conn)
		if err != nil {
			return fmt.Errorf("WebSocket, waiting for %s: %w", ok, err)
		}
		switch f.Type {
		case ok:
			return nil
		case "error":
			return fmt.Errorf("%s: %s (%w)", f.Code, f.Detail, errRefused)
		case "ping":
			if err := pongR(ctx, conn, f); err != nil {
				return err
			}
		}
	}
}

// pongR answers the relay's ping f.
func pongR(ctx context.Context, conn *websocket.Conn, f frame) error {
	if err := writeJSONFrame(ctx, conn, map[string]any{"type": "pong", "t": f.T}); err != nil {
		return fmt.Errorf("WebSocket pong: %w", err)
	}
	return nil
}

func (s *wsRSource) Next(ctx context.Context) (item, error) {
	for {
		f, b, err := readFrame(ctx, s.conn)
		if err != nil {
			return item{}, wsEnd(ctx, err)
		}
		switch {
		case strings.Contains(f.Type, "."):
			return item{Type: f.Type, Data: b}, nil
		case f.Type == "ping":
			if err := pongR(ctx, s.conn, f); err != nil {
				return item{}, err
			}
		case f.Type == "replay-exhausted":
			return item{Note: "replay-exhausted " + string(b)}, nil
		case f.Type == "closing":
			return item{Note: "closing " + string(b)}, nil
		case f.Type == "error":
			return item{}, fmt.Errorf("relay error %s: %s", f.Code, f.Detail)
		}
	}
}

func (s *wsRSource) Close() error {
	return s.conn.Close(websocket.StatusNormalClosure, "aepctl done")
}
