package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// RequestIDHeader carries a request's id in both directions: an incoming
// value is kept when it is well-formed, otherwise the gateway makes one; the
// response always carries it, and so does the access log line.
const RequestIDHeader = "X-Request-Id"

// maxRequestIDLen bounds an incoming request id (log lines and headers stay
// small whatever a client sends).
const maxRequestIDLen = 128

// requestInfo is what the access log learns while a request runs. It is
// created by the outermost middleware and filled in by inner ones
// (authenticate sets the tenant), since a context value set inside is not
// visible outside. One request's goroutine writes it, except for a handler
// that hands its request to another goroutine, hence the atomic.
type requestInfo struct {
	id      string
	tenant  atomic.Pointer[string]
	traceID atomic.Pointer[string] // the request's server span, when tracing is on
	parked  bool                   // the handler's stream parked: logged when it ends; set and read in the request's goroutine
}

type requestInfoKey struct{}

func requestInfoFrom(ctx context.Context) *requestInfo {
	ri, _ := ctx.Value(requestInfoKey{}).(*requestInfo)
	return ri
}

// RequestIDFrom returns the id of the request whose context ctx is ("" outside
// the gateway's handlers), for log lines of handlers mounted on the Server.
func RequestIDFrom(ctx context.Context) string {
	if ri := requestInfoFrom(ctx); ri != nil {
		return ri.id
	}
	return ""
}

// noteTenant records the authenticated tenant for the access log.
func noteTenant(ctx context.Context, tenant string) {
	if ri := requestInfoFrom(ctx); ri != nil {
		ri.tenant.Store(&tenant)
	}
}

// noteTrace records the request's trace id for the access log, so that a
// line leads to its trace.
func noteTrace(ctx context.Context, traceID string) {
	if ri := requestInfoFrom(ctx); ri != nil {
		ri.traceID.Store(&traceID)
	}
}

// responseStatus is the status a request was answered with: 101 for a
// WebSocket upgrade whose handler took the connection over (the 101 went out
// on the hijacked connection, not through w), 200 when nothing was written.
func responseStatus(r *http.Request, ww middleware.WrapResponseWriter) int {
	if status := ww.Status(); status != 0 {
		return status
	}
	return streamStatus(r)
}

// streamStatus is the status a parked stream was answered with: 101 for a
// WebSocket, 200 for SSE.
func streamStatus(r *http.Request) int {
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return http.StatusSwitchingProtocols
	}
	return http.StatusOK
}

// quietRoutes are the probe and scrape routes: polled every few seconds by
// the orchestrator and Prometheus, they are logged at debug, not info
// (a failing one, 5xx, still at info).
var quietRoutes = map[string]bool{"GET /healthz": true, "GET /readyz": true, "GET /metrics": true, "HEAD /healthz": true, "HEAD /readyz": true}

// requestID returns the client's X-Request-Id when it is a reasonable token
// (1..128 of letters, digits and "-_.:"), else a new random one.
func requestID(r *http.Request) string {
	if id := r.Header.Get(RequestIDHeader); id != "" && len(id) <= maxRequestIDLen && strings.IndexFunc(id, badIDRune) < 0 {
		return id
	}
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (Go 1.24+)
	return hex.EncodeToString(b[:])
}

func badIDRune(c rune) bool {
	return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.:", c))
}

// accessLogger writes one info line per request, or one in every Nth
// (Config.AccessLogSampleN) with server errors always written. It logs the
// path without the query string, which may carry an access_token, and never
// a header value other than the request id.
type accessLogger struct {
	log     zerolog.Logger
	sampleN uint64
	seen    atomic.Uint64
}

func newAccessLogger(log zerolog.Logger, sampleN int) *accessLogger {
	if sampleN < 1 {
		sampleN = 1
	}
	return &accessLogger{log: log, sampleN: uint64(sampleN)}
}

func (a *accessLogger) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ri := &requestInfo{id: requestID(r)}
		w.Header().Set(RequestIDHeader, ri.id)
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		start := time.Now()
		ctx := context.WithValue(r.Context(), requestInfoKey{}, ri)
		if mayPark(r) {
			ctx = transport.OnPark(ctx, a.onPark(r, ri, start))
		}
		next.ServeHTTP(ww, r.WithContext(ctx))
		if ri.parked {
			return // logged when the stream ends
		}
		status := responseStatus(r, ww)
		a.write(ri, r.Method, routeOf(r), r.URL.Path, r.RemoteAddr, status, int64(ww.BytesWritten()), start)
	})
}

// onPark is the access log's transport.OnPark hook: a parked stream's line
// is written when it ends, with the bytes it wrote and how long it lasted,
// from what the request said when it parked (the request is not kept).
func (a *accessLogger) onPark(r *http.Request, ri *requestInfo, start time.Time) func() func(int64) {
	return func() func(int64) {
		ri.parked = true
		method, route, path, remote, status := r.Method, routeOf(r), r.URL.Path, r.RemoteAddr, streamStatus(r)
		return func(written int64) { a.write(ri, method, route, path, remote, status, written, start) }
	}
}

// write writes the line of one request, unless sampled out.
func (a *accessLogger) write(ri *requestInfo, method, route, path, remote string, status int, written int64, start time.Time) {
	if status < 500 && a.seen.Add(1)%a.sampleN != 0 {
		return
	}
	tenant := ""
	if t := ri.tenant.Load(); t != nil {
		tenant = *t
	}
	ev := a.log.Info()
	if status < 500 && quietRoutes[method+" "+route] {
		ev = a.log.Debug()
	}
	if !ev.Enabled() {
		return
	}
	if t := ri.traceID.Load(); t != nil {
		ev = ev.Str("trace_id", *t)
	}
	ev.Str("request_id", ri.id).Str("method", method).Str("route", route).Str("path", path).
		Int("status", status).Int64("bytes", written).Dur("latency_ms", time.Since(start)).
		Str("tenant", tenant).Str("remote", remote).Msg("request")
}

// mayPark: only a GET can become a parked SSE stream; other requests skip
// the hook (and its allocations).
func mayPark(r *http.Request) bool { return r.Method == http.MethodGet }

// routeOf is the chi route pattern of r ("unmatched" for none). It is
// valid only while the request is being served: chi reuses its routing
// context afterwards.
func routeOf(r *http.Request) string {
	if route := chi.RouteContext(r.Context()).RoutePattern(); route != "" {
		return route
	}
	return "unmatched"
}
