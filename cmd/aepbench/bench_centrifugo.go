package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aep-gateway/aep-gateway/internal/aepclient"
	"github.com/coder/websocket"
)

// centrifugoChannel is the one channel every Centrifugo subscriber is put
// on, by its connection token's channels claim (server-side subscription,
// as the unidirectional transports need).
const centrifugoChannel = "bench"

// centrifugoPeer drives Centrifugo v6: publishes through its HTTP API
// (/api/batch), subscribers on /connection/uni_sse or
// /connection/uni_websocket with an HS256 connection token.
type centrifugoPeer struct {
	srv     *server
	hc      *http.Client
	apiKey  string
	secret  []byte
	users   atomic.Int64
	retries atomic.Int64 // publish requests sent again after no answer
}

func (c *centrifugoPeer) Server() *server { return c.srv }

// centrifugoConfig is the generated configuration: unidirectional SSE and
// WebSocket on, HTTP API with a key, HS256 connection tokens, logs at error.
func centrifugoConfig(port int, apiKey string, secret []byte) ([]byte, error) {
	cfg := map[string]any{
		"http_server":   map[string]any{"address": "127.0.0.1", "port": strconv.Itoa(port)},
		"log":           map[string]any{"level": "error"},
		"http_api":      map[string]any{"key": apiKey},
		"client":        map[string]any{"token": map[string]any{"hmac_secret_key": string(secret)}, "allowed_origins": []string{"*"}},
		"uni_sse":       map[string]any{"enabled": true},
		"uni_websocket": map[string]any{"enabled": true},
	}
	return json.MarshalIndent(cfg, "", "  ")
}

// startCentrifugo writes a configuration into dir and starts bin on a free
// loopback port.
func startCentrifugo(ctx context.Context, bin, dir string) (*centrifugoPeer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &centrifugoPeer{hc: centrifugoHTTPClient(), apiKey: randHex(16), secret: []byte(randHex(32))}
	cfg, err := centrifugoConfig(port, p.apiKey, p.secret)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "centrifugo.json")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		return nil, fmt.Errorf("centrifugo config: %w", err)
	}
	u := fmt.Sprintf("http://127.0.0.1:%d", port)
	p.srv, err = startServer(ctx, "centrifugo", bin, []string{"--config", path}, dir, u, "/health")
	if err != nil {
		return nil, err
	}
	return p, nil
}

// attachCentrifugo is a Centrifugo the bench was pointed at: its URL, pid
// (0: not measured), API key and token secret.
func attachCentrifugo(u string, pid int, apiKey, secret string) *centrifugoPeer {
	return &centrifugoPeer{srv: &server{name: "centrifugo", url: u, pid: pid}, hc: centrifugoHTTPClient(), apiKey: apiKey, secret: []byte(secret)}
}

// centrifugoHTTPClient drops idle connections after 5s: Centrifugo's HTTP
// server closes them after 30s (its idle timeout is its ReadTimeout), and a
// POST on a connection closing under it fails with EOF and may or may not
// have been published, which no client can replay safely.
func centrifugoHTTPClient() *http.Client {
	hc := benchHTTPClient()
	hc.Transport.(*http.Transport).IdleConnTimeout = 5 * time.Second
	return hc
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// token signs a connection JWT for a new user, subscribed server-side to
// centrifugoChannel.
func (c *centrifugoPeer) token() string {
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	claims, _ := json.Marshal(map[string]any{
		"sub": "u" + strconv.FormatInt(c.users.Add(1), 10), "channels": []string{centrifugoChannel},
		"exp": time.Now().Add(24 * time.Hour).Unix(),
	})
	msg := head + "." + enc.EncodeToString(claims)
	m := hmac.New(sha256.New, c.secret)
	m.Write([]byte(msg))
	return msg + "." + enc.EncodeToString(m.Sum(nil))
}

func (c *centrifugoPeer) connectParam() string {
	b, _ := json.Marshal(map[string]string{"token": c.token()})
	return url.QueryEscape(string(b))
}

func (c *centrifugoPeer) Subscribe(ctx context.Context, transport string) (subscriber, error) {
	if transport == transportWS {
		u := "ws" + strings.TrimPrefix(c.srv.url, "http") + "/connection/uni_websocket?cf_connect=" + c.connectParam()
		conn, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.hc})
		if err != nil {
			return nil, fmt.Errorf("centrifugo uni_websocket: %w", err)
		}
		conn.SetReadLimit(aepclient.MaxSSELine)
		// The connect reply comes once the server-side subscriptions are made.
		if _, msg, err := conn.Read(ctx); err != nil || !bytes.Contains(msg, []byte(`"connect"`)) {
			conn.CloseNow()
			return nil, fmt.Errorf("centrifugo uni_websocket: no connect reply (%.200s): %v", msg, err)
		}
		return newWSSubscriber(conn, nil), nil
	}
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodGet,
		c.srv.url+"/connection/uni_sse?cf_connect="+c.connectParam(), nil)
	if err != nil {
		return nil, err
	}
	return openSSESub(c.hc, req, true)
}

// Publish sends the events as one /api/batch of publish commands, each
// event's JSON as the publication's data. A request that got no answer at
// all (the connection closed) is sent again, at most twice, and counted in
// retries: Centrifugo may have published it, and then the subscribers get
// the events twice, which the report's "missing" shows as negative.
func (c *centrifugoPeer) Publish(ctx context.Context, events [][]byte) error {
	var err error
	for attempt := range 3 {
		if attempt > 0 {
			c.retries.Add(1)
		}
		var answered bool
		if answered, err = c.publishOnce(ctx, events); err == nil || answered || ctx.Err() != nil {
			return err
		}
	}
	return err
}

func (c *centrifugoPeer) publishOnce(ctx context.Context, events [][]byte) (answered bool, err error) {
	var body bytes.Buffer
	body.WriteString(`{"commands":[`)
	for i, e := range events {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(`{"publish":{"channel":"` + centrifugoChannel + `","data":`)
		body.Write(e)
		body.WriteString(`}}`)
	}
	body.WriteString(`]}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.srv.url+"/api/batch", &body)
	if err != nil {
		return true, err
	}
	req.Header.Set("X-API-Key", c.apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("centrifugo publish: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK || bytes.Contains(b, []byte(`"error"`)) {
		return true, fmt.Errorf("centrifugo publish: status %d: %.300s", resp.StatusCode, b)
	}
	return true, nil
}

// PublishRetries is how many publish requests were sent again so far.
func (c *centrifugoPeer) PublishRetries() int64 { return c.retries.Load() }
