package aepclient

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

// Item is one thing read from a stream: an event (Data set) or a note for
// stderr (Note set).
type Item struct {
	Type string // the event's type (the SSE event: field, or the frame's "type")
	ID   string // the SSE id: of the message, "" on WebSocket
	Data []byte // the event's JSON
	Note string // a remark about the stream (replay-exhausted, closing)
}

// Source is an open stream of one dialect over one transport. Next blocks
// until an item arrives, the stream ends (io.EOF) or ctx is done. A source
// is owned by one goroutine; Close may be called once after the last Next.
type Source interface {
	Next(ctx context.Context) (Item, error)
	Close() error
}

// StreamSpec says what to open.
type StreamSpec struct {
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

// DFilterKeys are the D filter members in the order they are sent.
var DFilterKeys = []string{"types", "source", "target", "topic", "session_id", "conversation_id", "task_id"}

// OpenStream opens spec on the gateway.
func OpenStream(ctx context.Context, c *Client, spec StreamSpec) (Source, error) {
	switch {
	case spec.Dialect == aep.DialectD && spec.Transport == "sse":
		q := url.Values{}
		for _, k := range DFilterKeys {
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
		return OpenSSESource(ctx, c, "/aep/events?"+q.Encode())
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
		return OpenSSESource(ctx, c, "/stream?"+q.Encode())
	case spec.Dialect == aep.DialectD:
		return OpenWSD(ctx, c, spec)
	default:
		return OpenWSR(ctx, c, spec)
	}
}

// SSESource reads an SSE stream of either dialect.
type SSESource struct {
	resp *http.Response
	r    *sseReader
}

func OpenSSESource(ctx context.Context, c *Client, path string) (*SSESource, error) {
	resp, err := c.OpenSSE(ctx, path)
	if err != nil {
		return nil, err
	}
	return &SSESource{resp: resp, r: NewSSEReader(resp.Body)}, nil
}

func (s *SSESource) Next(ctx context.Context) (Item, error) {
	for {
		m, err := s.r.Next()
		if err != nil {
			if ctx.Err() != nil {
				return Item{}, ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				return Item{}, io.EOF
			}
			return Item{}, fmt.Errorf("read stream: %w", err)
		}
		switch {
		case strings.HasPrefix(m.Comment, "replay-exhausted"), strings.HasPrefix(m.Comment, "closing"):
			return Item{Note: m.Comment}, nil
		case m.Comment != "" || len(m.Data) == 0:
			continue // stream open, heartbeat, ping
		}
		return Item{Type: m.Event, ID: m.ID, Data: m.Data}, nil
	}
}

func (s *SSESource) Close() error { return s.resp.Body.Close() }

// WSSetupTimeout bounds a WebSocket's handshake messages (hello or
// session.opened, then the subscription's answer).
const WSSetupTimeout = 30 * time.Second

// DialWS opens a WebSocket to path with the bearer token.
func DialWS(ctx context.Context, c *Client, path string, subprotocols []string) (*websocket.Conn, error) {
	u, err := c.WSURL(path)
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
	conn.SetReadLimit(MaxSSELine)
	return conn, nil
}

// Frame is the part of a WebSocket message of either dialect aepctl reads.
type Frame struct {
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

func ReadFrame(ctx context.Context, conn *websocket.Conn) (Frame, []byte, error) {
	_, b, err := conn.Read(ctx)
	if err != nil {
		return Frame{}, nil, err
	}
	var f Frame
	if err := json.Unmarshal(b, &f); err != nil {
		return Frame{}, nil, fmt.Errorf("a WebSocket message is not JSON: %.200q", b)
	}
	return f, b, nil
}

// WSEnd maps the error that ended a WebSocket read: ctx's error, io.EOF
// for a normal or going-away close, else the error.
func WSEnd(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case websocket.CloseStatus(err) == websocket.StatusNormalClosure, websocket.CloseStatus(err) == websocket.StatusGoingAway:
		return io.EOF
	}
	return fmt.Errorf("read WebSocket: %w", err)
}

func WriteJSONFrame(ctx context.Context, conn *websocket.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return conn.Write(ctx, websocket.MessageText, b)
}

// ErrRefused marks a subscription the gateway refused in-band over a
// WebSocket: retrying would get the same answer.
var ErrRefused = errors.New("refused")

// DErrorPayload is the error member of D's rejection payloads.
type DErrorPayload struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Retryable bool   `json:"retryable"`
	} `json:"error"`
	Reason string `json:"reason"`
	Cursor string `json:"cursor"`
}

func (p DErrorPayload) String() string {
	s := strings.TrimSpace(p.Error.Code + ": " + p.Error.Message)
	if p.Reason != "" {
		s = p.Reason + " " + s
	}
	return strings.Trim(s, ": ")
}

// WSDSource is dialect D over WebSocket: a session with one subscription.
type WSDSource struct {
	conn   *websocket.Conn
	cursor string // subscription.created's starting cursor
}

// Conn is the subscribed connection, for a caller that reads the frames
// itself (aepbench's subscribers) instead of calling Next.
func (s *WSDSource) Conn() *websocket.Conn { return s.conn }

// Cursor is the starting cursor subscription.created carried ("" when none).
func (s *WSDSource) Cursor() string { return s.cursor }

func OpenWSD(ctx context.Context, c *Client, spec StreamSpec) (*WSDSource, error) {
	conn, err := DialWS(ctx, c, "/aep", []string{"aep-0.1"})
	if err != nil {
		return nil, err
	}
	s := &WSDSource{conn: conn}
	session := "sess_aepctl_" + strings.ToLower(NewDEnvelope("", "", nil).ID[4:])
	hctx, cancel := context.WithTimeout(ctx, WSSetupTimeout)
	defer cancel()
	if err := s.handshake(hctx, session, spec); err != nil {
		conn.CloseNow()
		return nil, err
	}
	return s, nil
}

func (s *WSDSource) handshake(ctx context.Context, session string, spec StreamSpec) error {
	if err := WriteJSONFrame(ctx, s.conn, NewDEnvelope("session.opened", session, map[string]string{"session_id": session, "version": "0.1"})); err != nil {
		return fmt.Errorf("WebSocket: %w", err)
	}
	if err := s.await(ctx, "session.ready", "session.error"); err != nil {
		return err
	}
	filter := map[string]any{}
	for _, k := range DFilterKeys {
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
	if err := WriteJSONFrame(ctx, s.conn, NewDEnvelope("subscription.requested", session, filter)); err != nil {
		return fmt.Errorf("WebSocket: %w", err)
	}
	return s.await(ctx, "subscription.created", "subscription.rejected")
}

// await reads until a message of type ok (nil) or refused (its error).
func (s *WSDSource) await(ctx context.Context, ok, refused string) error {
	for {
		f, _, err := ReadFrame(ctx, s.conn)
		if err != nil {
			return fmt.Errorf("WebSocket, waiting for %s: %w", ok, err)
		}
		var p DErrorPayload
		_ = json.Unmarshal(f.Payload, &p)
		switch f.Type {
		case ok:
			s.cursor = p.Cursor
			return nil
		case refused, "session.error":
			return fmt.Errorf("%s: %s (%w)", f.Type, p, ErrRefused)
		}
	}
}

func (s *WSDSource) Next(ctx context.Context) (Item, error) {
	for {
		f, b, err := ReadFrame(ctx, s.conn)
		if err != nil {
			return Item{}, WSEnd(ctx, err)
		}
		var p DErrorPayload
		switch f.Type {
		case "session.error", "subscription.expired":
			_ = json.Unmarshal(f.Payload, &p)
			return Item{}, fmt.Errorf("%s: %s", f.Type, p)
		case "subscription.cancelled":
			return Item{}, io.EOF
		case "session.ready", "capabilities.declared", "session.heartbeat":
			continue
		}
		return Item{Type: f.Type, Data: b}, nil
	}
}

func (s *WSDSource) Close() error {
	return s.conn.Close(websocket.StatusNormalClosure, "aepctl done")
}

// WSRSource is dialect R over WebSocket (AEP-0003 §3.5): a consumer hello
// and one subscription.
type WSRSource struct {
	conn *websocket.Conn
}

// Conn is the subscribed connection, for a caller that reads the frames
// itself (aepbench's subscribers) instead of calling Next.
func (s *WSRSource) Conn() *websocket.Conn { return s.conn }

const wsRSubID = "aepctl"

func OpenWSR(ctx context.Context, c *Client, spec StreamSpec) (*WSRSource, error) {
	conn, err := DialWS(ctx, c, "/socket", nil)
	if err != nil {
		return nil, err
	}
	s := &WSRSource{conn: conn}
	hctx, cancel := context.WithTimeout(ctx, WSSetupTimeout)
	defer cancel()
	if err := s.handshake(hctx, spec); err != nil {
		conn.CloseNow()
		return nil, err
	}
	return s, nil
}

// RHello is a dialect R hello of role, identity agent.
func RHello(role, agent string) map[string]any {
	return map[string]any{"type": "hello", "versions": []string{"0.1"}, "role": role, "identity": map[string]string{"agent": agent}}
}

// SayHelloR sends hello and waits for the relay's hello.
func SayHelloR(ctx context.Context, conn *websocket.Conn, hello any) error {
	if err := WriteJSONFrame(ctx, conn, hello); err != nil {
		return fmt.Errorf("WebSocket: %w", err)
	}
	return AwaitR(ctx, conn, "hello")
}

func (s *WSRSource) handshake(ctx context.Context, spec StreamSpec) error {
	if err := SayHelloR(ctx, s.conn, RHello("consumer", "aepctl")); err != nil {
		return err
	}
	return SubscribeR(ctx, s.conn, wsRSubID, spec)
}

// SubscribeR sends the subscribe frame of spec and waits for subscribed.
func SubscribeR(ctx context.Context, conn *websocket.Conn, id string, spec StreamSpec) error {
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
	if err := WriteJSONFrame(ctx, conn, sub); err != nil {
		return fmt.Errorf("WebSocket: %w", err)
	}
	return AwaitR(ctx, conn, "subscribed")
}

// AwaitR reads dialect R frames until one of type ok, answering pings; an
// error frame is ErrRefused.
func AwaitR(ctx context.Context, conn *websocket.Conn, ok string) error {
	for {
		f, _, err := ReadFrame(ctx, conn)
		if err != nil {
			return fmt.Errorf("WebSocket, waiting for %s: %w", ok, err)
		}
		switch f.Type {
		case ok:
			return nil
		case "error":
			return fmt.Errorf("%s: %s (%w)", f.Code, f.Detail, ErrRefused)
		case "ping":
			if err := PongR(ctx, conn, f); err != nil {
				return err
			}
		}
	}
}

// PongR answers the relay's ping f.
func PongR(ctx context.Context, conn *websocket.Conn, f Frame) error {
	if err := WriteJSONFrame(ctx, conn, map[string]any{"type": "pong", "t": f.T}); err != nil {
		return fmt.Errorf("WebSocket pong: %w", err)
	}
	return nil
}

func (s *WSRSource) Next(ctx context.Context) (Item, error) {
	for {
		f, b, err := ReadFrame(ctx, s.conn)
		if err != nil {
			return Item{}, WSEnd(ctx, err)
		}
		switch {
		case strings.Contains(f.Type, "."):
			return Item{Type: f.Type, Data: b}, nil
		case f.Type == "ping":
			if err := PongR(ctx, s.conn, f); err != nil {
				return Item{}, err
			}
		case f.Type == "replay-exhausted":
			return Item{Note: "replay-exhausted " + string(b)}, nil
		case f.Type == "closing":
			return Item{Note: "closing " + string(b)}, nil
		case f.Type == "error":
			return Item{}, fmt.Errorf("relay error %s: %s", f.Code, f.Detail)
		}
	}
}

func (s *WSRSource) Close() error {
	return s.conn.Close(websocket.StatusNormalClosure, "aepctl done")
}
