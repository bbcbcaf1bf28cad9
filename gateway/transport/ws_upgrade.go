package transport

import (
	"crypto/sha1" //nolint:gosec // RFC 6455 §4.2.2 names SHA-1 for Sec-WebSocket-Accept
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// UpgradeOptions is how Upgrade accepts a WebSocket handshake.
type UpgradeOptions struct {
	// Subprotocols the server speaks, in preference order; the first the
	// client offers is selected. Empty selects none.
	Subprotocols []string
	// OriginPatterns are the host patterns (path.Match, case-insensitive;
	// "scheme://host" patterns match the scheme too) a cross-origin
	// handshake may come from. A request without Origin, or whose Origin's
	// host is the request's Host, is always accepted. Same policy as
	// coder/websocket's AcceptOptions.OriginPatterns, which the gateway's
	// CORS settings are written for (gateway/cors.go).
	OriginPatterns []string
	// ReadLimit is the largest message read, in bytes; a larger one closes
	// the connection with 1009. Zero means 32 KiB.
	ReadLimit int64
}

// Upgrade accepts the WebSocket handshake of r (RFC 6455 §4.2) and hijacks
// the connection. On error it has written the HTTP response (400, 403, 405,
// 426 or 501, as coder/websocket's Accept does) and the error says why.
func Upgrade(w http.ResponseWriter, r *http.Request, o UpgradeOptions) (*Socket, error) {
	if code, err := verifyHandshake(w, r); err != nil {
		http.Error(w, err.Error(), code)
		return nil, err
	}
	if err := authenticateOrigin(r, o.OriginPatterns); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return nil, err
	}
	h := w.Header()
	h.Set("Upgrade", "websocket")
	h.Set("Connection", "Upgrade")
	h.Set("Sec-WebSocket-Accept", secWebSocketAccept(strings.TrimSpace(r.Header.Get("Sec-WebSocket-Key"))))
	if sp := selectSubprotocol(r.Header, o.Subprotocols); sp != "" {
		h.Set("Sec-WebSocket-Protocol", sp)
	}
	rc := http.NewResponseController(w)
	w.WriteHeader(http.StatusSwitchingProtocols)
	nc, brw, err := rc.Hijack()
	if err != nil {
		err = fmt.Errorf("transport: websocket hijack: %w", err)
		http.Error(w, http.StatusText(http.StatusNotImplemented), http.StatusNotImplemented)
		return nil, err
	}
	limit := o.ReadLimit
	if limit <= 0 {
		limit = 32 << 10
	}
	// Bytes the client sent after its handshake may already sit in the
	// server's 4 KiB reader; keep only those (a copy), not the reader.
	var early []byte
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		early = append([]byte(nil), b...)
	}
	s := newSocket(nc, early, limit)
	s.hooks, _ = r.Context().Value(parkHooksKey{}).(*parkHook)
	return s, nil
}

func verifyHandshake(w http.ResponseWriter, r *http.Request) (int, error) {
	upgradeRequired := func(format string, args ...any) (int, error) {
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "websocket")
		return http.StatusUpgradeRequired, fmt.Errorf(format, args...)
	}
	switch {
	case !r.ProtoAtLeast(1, 1):
		return http.StatusUpgradeRequired, fmt.Errorf("WebSocket protocol violation: handshake request must be at least HTTP/1.1: %q", r.Proto)
	case !headerHasToken(r.Header, "Connection", "Upgrade"):
		return upgradeRequired("WebSocket protocol violation: Connection header %q does not contain Upgrade", r.Header.Get("Connection"))
	case !headerHasToken(r.Header, "Upgrade", "websocket"):
		return upgradeRequired("WebSocket protocol violation: Upgrade header %q does not contain websocket", r.Header.Get("Upgrade"))
	case r.Method != http.MethodGet:
		return http.StatusMethodNotAllowed, fmt.Errorf("WebSocket protocol violation: handshake request method is not GET but %q", r.Method)
	case r.Header.Get("Sec-WebSocket-Version") != "13":
		w.Header().Set("Sec-WebSocket-Version", "13")
		return http.StatusBadRequest, fmt.Errorf("unsupported WebSocket protocol version (only 13 is supported): %q", r.Header.Get("Sec-WebSocket-Version"))
	}
	keys := r.Header.Values("Sec-WebSocket-Key")
	switch {
	case len(keys) == 0:
		return http.StatusBadRequest, errors.New("WebSocket protocol violation: missing Sec-WebSocket-Key")
	case len(keys) > 1:
		return http.StatusBadRequest, errors.New("WebSocket protocol violation: multiple Sec-WebSocket-Key headers")
	}
	if v, err := base64.StdEncoding.DecodeString(strings.TrimSpace(keys[0])); err != nil || len(v) != 16 {
		return http.StatusBadRequest, fmt.Errorf("WebSocket protocol violation: invalid Sec-WebSocket-Key %q, must be a 16 byte base64 encoded string", keys[0])
	}
	return 0, nil
}

func authenticateOrigin(r *http.Request, patterns []string) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil {
		return fmt.Errorf("failed to parse Origin header %q: %w", origin, err)
	}
	if strings.EqualFold(r.Host, u.Host) {
		return nil
	}
	for _, p := range patterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		ok, err := path.Match(strings.ToLower(p), strings.ToLower(target))
		if err != nil {
			return errors.New(http.StatusText(http.StatusForbidden))
		}
		if ok {
			return nil
		}
	}
	if u.Host == "" {
		return fmt.Errorf("request Origin %q is not a valid URL with a host", origin)
	}
	return fmt.Errorf("request Origin %q is not authorized for Host %q", u.Host, r.Host)
}

func selectSubprotocol(h http.Header, ours []string) string {
	offered := headerTokens(h, "Sec-WebSocket-Protocol")
	for _, sp := range ours {
		for _, cp := range offered {
			if strings.EqualFold(sp, cp) {
				return cp
			}
		}
	}
	return ""
}

func headerHasToken(h http.Header, key, token string) bool {
	for _, t := range headerTokens(h, key) {
		if strings.EqualFold(t, token) {
			return true
		}
	}
	return false
}

func headerTokens(h http.Header, key string) []string {
	var out []string
	for _, v := range h.Values(key) {
		for t := range strings.SplitSeq(v, ",") {
			out = append(out, strings.TrimSpace(t))
		}
	}
	return out
}

var keyGUID = []byte("258EAFA5-E914-47DA-95CA-C5AB0DC85B11")

func secWebSocketAccept(key string) string {
	h := sha1.New() //nolint:gosec // see the import
	h.Write([]byte(key))
	h.Write(keyGUID)
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}
