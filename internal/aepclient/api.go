package aepclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// maxAPIBody bounds a JSON answer read from the gateway (a subscription
// list or an ack answer for 10,000 acks fits well within it).
const maxAPIBody = 16 << 20

// APIError is a gateway answer outside 2xx, decoded from either dialect's
// error body.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("HTTP %d", e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// apiErrorFrom reads resp's body into an APIError.
func apiErrorFrom(resp *http.Response) *APIError {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	r := decodeBody(resp.StatusCode, raw, 0)
	return &APIError{Status: resp.StatusCode, Code: r.Code, Message: r.Detail}
}

func (c *Client) HTTPClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

// Request builds a request to path (with its query) on the gateway, with the
// bearer token when there is one.
func (c *Client) Request(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.BaseURL, "/")+path, body)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	return req, nil
}

// DoJSON sends in (when not nil) as JSON and decodes a 2xx answer into out
// (when not nil). A non-2xx answer is an *APIError.
func (c *Client) DoJSON(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := c.Request(ctx, method, path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s %s: %w", method, path, apiErrorFrom(resp))
	}
	if out == nil {
		return nil
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAPIBody+1))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if len(raw) > maxAPIBody {
		return fmt.Errorf("%s %s: answer longer than %d bytes", method, path, maxAPIBody)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: answer is not the expected JSON: %w", method, path, err)
	}
	return nil
}

// OpenSSE starts a GET of an SSE stream at path and checks that the gateway
// answered 200 with an event stream.
func (c *Client) OpenSSE(ctx context.Context, path string) (*http.Response, error) {
	req, err := c.Request(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", pathOnly(path), err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %w", pathOnly(path), apiErrorFrom(resp))
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: answer is %q, not an event stream", pathOnly(path), ct)
	}
	return resp, nil
}

// pathOnly drops the query (it may hold a cursor or a filter) from messages.
func pathOnly(p string) string {
	p, _, _ = strings.Cut(p, "?")
	return p
}

// WSURL turns the gateway's base URL into a WebSocket URL for path.
func (c *Client) WSURL(path string) (string, error) {
	u, err := url.Parse(strings.TrimSuffix(c.BaseURL, "/") + path)
	if err != nil {
		return "", fmt.Errorf("gateway URL: %w", err)
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	case "ws", "wss":
	default:
		return "", fmt.Errorf("gateway URL %q: want http or https", c.BaseURL)
	}
	return u.String(), nil
}

// DEnvelope is a dialect D envelope aepctl sends (session and subscription
// messages, acknowledgements).
type DEnvelope struct {
	AEPVersion string `json:"aep_version"`
	ID         string `json:"id"`
	Type       string `json:"type"`
	Source     string `json:"source"`
	SessionID  string `json:"session_id,omitempty"`
	CreatedAt  string `json:"created_at"`
	Payload    any    `json:"payload"`
}

// AepctlSource is the D source of the envelopes aepctl generates.
const AepctlSource = "agent:aepctl"

func NewDEnvelope(typ, session string, payload any) DEnvelope {
	return DEnvelope{AEPVersion: "0.1", ID: "evt_" + ulid.Make().String(), Type: typ, Source: AepctlSource,
		SessionID: session, CreatedAt: time.Now().UTC().Format(time.RFC3339Nano), Payload: payload}
}
