package gateway

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/rs/cors"
)

// CORS methods and headers the gateway allows and exposes, and how long a
// browser may cache a preflight, in seconds (docs/security.md).
var (
	corsAllowMethods  = []string{http.MethodGet, http.MethodPost, http.MethodDelete, http.MethodOptions}
	corsAllowHeaders  = []string{"Authorization", "Content-Type", "Last-Event-ID", "AEP-Version"}
	corsExposeHeaders = []string{"Retry-After", "Location", "AEP-Version"}
)

const corsMaxAge = 600

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

// sameOrigin reports whether origin names the host the request was sent
// to (a browser page served by the gateway's own address).
func sameOrigin(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

// newCORS is github.com/rs/cors configured for origins (nil for none:
// rs/cors would read an empty list as every origin). It answers preflights
// (204) and sets the response headers; which origins are refused outright
// is the cors middleware's decision.
func newCORS(origins []string) *cors.Cors {
	if len(origins) == 0 {
		return nil
	}
	return cors.New(cors.Options{
		AllowedOrigins: origins, // exact, or one "*" as the first label: the forms ParseCORSOrigins accepts
		AllowedMethods: corsAllowMethods,
		AllowedHeaders: corsAllowHeaders,
		ExposedHeaders: corsExposeHeaders,
		MaxAge:         corsMaxAge,
		// No credentials (cookies): the gateway authenticates with bearer
		// tokens, which a page sends in Authorization or ?access_token=.
	})
}

// cors answers preflight requests and marks responses readable for the
// allowed origins (Config.CORSOrigins), through rs/cors. A request whose
// Origin is neither allowed nor the gateway's own is refused with 403
// forbidden-origin, so that a page on another origin cannot even trigger
// writes (rs/cors alone would serve it, only without the headers that let
// the page read the answer). Requests without an Origin (non-browser
// clients) pass untouched.
func (s *Server) cors(next http.Handler) http.Handler {
	withCORS := next
	if s.corsLib != nil {
		withCORS = s.corsLib.Handler(next)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			if s.corsLib != nil {
				w.Header().Add("Vary", "Origin") // the answer depends on Origin, even when there is none
			}
			next.ServeHTTP(w, r)
			return
		}
		if s.corsLib == nil || !s.corsLib.OriginAllowed(r) {
			w.Header().Add("Vary", "Origin")
			preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
			if sameOrigin(r, origin) && !preflight {
				next.ServeHTTP(w, r)
				return
			}
			writeJSON(w, http.StatusForbidden, rError{Error: "forbidden-origin",
				Detail: "origin " + origin + " is not allowed (--cors-allowed-origins)"})
			return
		}
		withCORS.ServeHTTP(w, r)
	})
}
