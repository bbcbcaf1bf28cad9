package gateway

import (
	"net"
	"net/http"
	"strings"
)

// loopbackHost reports whether a request's Host names the loopback
// interface: localhost, 127.0.0.0/8 or ::1, with any port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// devHostGuard is the DNS-rebinding defence of development mode: a page
// on attacker.example whose name now resolves to 127.0.0.1 reaches the
// developer's gateway with Host: attacker.example, and development mode
// answers nobody but loopback names (421 otherwise). Health probes are
// exempt; Config.DevAnyHost (--allow-unauthenticated) turns the guard off.
func (s *Server) devHostGuard(next http.Handler) http.Handler {
	if !s.auth().Dev() || s.cfg.DevAnyHost {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if loopbackHost(r.Host) || r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			next.ServeHTTP(w, r)
			return
		}
		writeJSON(w, http.StatusMisdirectedRequest, rError{Error: "misdirected-request",
			Detail: "development mode answers only requests whose Host is localhost, 127.0.0.0/8 or [::1] (DNS-rebinding defence); configure authentication to serve other names"})
	})
}

// queryTokenAllowed reports whether a request may carry its bearer token
// in ?access_token=: only the streaming GETs, whose browser clients
// (EventSource, WebSocket) cannot set an Authorization header. Every other
// route needs the header, so tokens stay out of URLs where they are not
// needed.
func queryTokenAllowed(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	switch p := r.URL.Path; p {
	case "/aep/events", "/stream", "/aep", "/socket":
		return true
	default:
		if strings.HasPrefix(p, "/console/") {
			return true // the console's page and assets (a browser cannot send a header to load them)
		}
		rest, ok := strings.CutPrefix(p, "/aep/subscriptions/")
		id, ok2 := strings.CutSuffix(rest, "/stream")
		return ok && ok2 && id != "" && !strings.Contains(id, "/")
	}
}
