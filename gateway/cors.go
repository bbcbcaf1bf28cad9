package gateway

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// CORS headers the gateway allows and exposes (docs/security.md).
const (
	corsAllowMethods  = "GET, POST, DELETE, OPTIONS"
	corsAllowHeaders  = "Authorization, Content-Type, Last-Event-ID, AEP-Version"
	corsExposeHeaders = "Retry-After, Location, AEP-Version"
	corsMaxAge        = "600"
)

// ParseCORSOrigins parses --cors-allowed-origins: a comma-separated list of
// exact origins ("https://app.example.com", "http://localhost:3000") and
// host patterns whose first label is "*" ("https://*.example.com", which
// matches every subdomain of example.com but not example.com itself).
// Each entry needs a scheme and a host and nothing else (no path, query or
// user). A bare "*" is refused: list the origins. The empty string is no
// origins. The result is normalized (lowercase) for Config.CORSOrigins.
func ParseCORSOrigins(list string) ([]string, error) {
	var out []string
	for _, raw := range strings.Split(list, ",") {
		o := strings.ToLower(strings.TrimSpace(raw))
		if o == "" {
			continue
		}
		if o == "*" || o == "null" {
			return nil, fmt.Errorf("cors origin %q: list the allowed origins (https://app.example.com or https://*.example.com)", raw)
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("cors origin %q: want scheme://host[:port], for example https://app.example.com", raw)
		}
		host := u.Host
		if rest, ok := strings.CutPrefix(host, "*."); ok {
			host = rest
		}
		if host == "" || strings.Contains(host, "*") {
			return nil, fmt.Errorf("cors origin %q: a wildcard may only be the whole first label (https://*.example.com)", raw)
		}
		out = append(out, u.Scheme+"://"+u.Host)
	}
	return out, nil
}

// WebSocketOriginPatterns turns CORS origins into the host patterns of
// coder/websocket's AcceptOptions.OriginPatterns, so that browsers allowed
// to call the HTTP routes may also open the WebSockets. (Those patterns
// match the Origin's host[:port] only, not its scheme.)
func WebSocketOriginPatterns(origins []string) []string {
	out := make([]string, 0, len(origins))
	for _, o := range origins {
		_, hostPort, _ := strings.Cut(o, "://")
		out = append(out, hostPort)
	}
	return out
}

// corsAllowed reports whether origin (as sent by a browser) is one of
// origins or matches one of their patterns.
func corsAllowed(origins []string, origin string) bool {
	origin = strings.ToLower(origin)
	scheme, host, ok := strings.Cut(origin, "://")
	if !ok || host == "" {
		return false
	}
	for _, o := range origins {
		if o == origin {
			return true
		}
		ps, ph, _ := strings.Cut(o, "://")
		suffix, wild := strings.CutPrefix(ph, "*")
		if wild && ps == scheme && strings.HasSuffix(host, suffix) && len(host) > len(suffix) &&
			!strings.ContainsAny(host[:len(host)-len(suffix)], "/:@") {
			return true
		}
	}
	return false
}

// sameOrigin reports whether origin names the host the request was sent
// to (a browser page served by the gateway's own address).
func sameOrigin(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

// cors answers preflight requests and marks responses readable for the
// allowed origins (Config.CORSOrigins). A request whose Origin is neither
// allowed nor the gateway's own is refused with 403 forbidden-origin, so
// that a page on another origin cannot even trigger writes. Requests
// without an Origin (non-browser clients) pass untouched. Credentials
// (cookies) are not allowed: the gateway authenticates with bearer
// tokens, which a page sends in Authorization or ?access_token=.
func (s *Server) cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		h := w.Header()
		if len(s.cfg.CORSOrigins) > 0 {
			h.Add("Vary", "Origin") // the answer depends on Origin, even when there is none
		}
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		if len(s.cfg.CORSOrigins) == 0 {
			h.Add("Vary", "Origin")
		}
		preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
		if !corsAllowed(s.cfg.CORSOrigins, origin) {
			if sameOrigin(r, origin) && !preflight {
				next.ServeHTTP(w, r)
				return
			}
			writeJSON(w, http.StatusForbidden, rError{Error: "forbidden-origin",
				Detail: "origin " + origin + " is not allowed (--cors-allowed-origins)"})
			return
		}
		h.Set("Access-Control-Allow-Origin", origin)
		if preflight {
			h.Add("Vary", "Access-Control-Request-Method")
			h.Add("Vary", "Access-Control-Request-Headers")
			h.Set("Access-Control-Allow-Methods", corsAllowMethods)
			h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
			h.Set("Access-Control-Max-Age", corsMaxAge)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
		next.ServeHTTP(w, r)
	})
}
