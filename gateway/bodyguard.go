package gateway

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
)

// errInflightFull and errBodyTimeout are what a guarded request body's Read
// returns when the tenant's in-flight byte cap is reached or the body did
// not arrive within the read timeout.
var (
	errInflightFull = errors.New("the tenant's in-flight ingest bytes are at their limit")
	errBodyTimeout  = errors.New("the request body did not arrive in time")
)

// inflight counts the ingest body bytes each tenant has in flight (read
// and not yet answered). Entries of tenants with nothing in flight are
// removed, so memory is bounded by the tenants with requests open.
type inflight struct {
	max int64

	mu    sync.Mutex
	bytes map[string]int64 // guarded by mu
}

func newInflight(max int64) *inflight { return &inflight{max: max, bytes: map[string]int64{}} }

// acquire adds n bytes to tenant's count if that stays within the cap.
func (f *inflight) acquire(tenant string, n int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bytes[tenant]+n > f.max {
		return false
	}
	f.bytes[tenant] += n
	return true
}

func (f *inflight) release(tenant string, n int64) {
	if n == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if left := f.bytes[tenant] - n; left > 0 {
		f.bytes[tenant] = left
	} else {
		delete(f.bytes, tenant)
	}
}

// bodyGuard bounds an ingest request's body in time (Config.ReadTimeout,
// through the connection's read deadline) and counts its bytes against the
// tenant's in-flight cap (Config.MaxInflightBytesPerTenant) until the
// response is written. A body with a Content-Length reserves it up front
// and is refused at once when it does not fit; a chunked body reserves as
// it is read. Must run after authenticate.
func (s *Server) bodyGuard(d aep.Dialect) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			g := &guardedBody{ReadCloser: r.Body, f: s.inflight, tenant: TenantFrom(r.Context()), rc: http.NewResponseController(w)}
			defer g.releaseAll()
			if s.inflight != nil && r.ContentLength > 0 && r.ContentLength <= s.ingest.limits.MaxBodyBytes {
				if !s.inflight.acquire(g.tenant, r.ContentLength) {
					s.refuseBody(w, d, errInflightFull)
					return
				}
				g.reserved, g.prepaid = r.ContentLength, true
			}
			if s.cfg.ReadTimeout > 0 {
				// Not every ResponseWriter can (an HTTP/2 stream in a test
				// server): then the server's own timeouts apply.
				if g.rc.SetReadDeadline(time.Now().Add(s.cfg.ReadTimeout)) == nil {
					g.deadline = true
				}
			}
			r.Body = g
			next.ServeHTTP(w, r)
		})
	}
}

// bodyDeadline bounds the arrival of every request body by
// Config.ReadTimeout, whatever the route and whether or not the request is
// authenticated (headers are the http.Server's ReadHeaderTimeout): the
// handler sees a read error past it (ingest answers 408, bodyGuard). And
// when the handler returns without having read its body to the end (a
// refusal: no credential, an unknown route, a method the route does not
// take, an early error), it stops net/http from draining the rest before
// and after the response: the response is written and the connection
// closed, so a client that declares a body and stalls holds no connection.
// Bytes that have already arrived are still drained, so a prompt client
// keeps its connection. Runs outermost, so the 404 and 405 answers are
// covered too.
func (s *Server) bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		b := &eofBody{ReadCloser: r.Body}
		rc := http.NewResponseController(w)
		if s.cfg.ReadTimeout > 0 && rc.SetReadDeadline(time.Now().Add(s.cfg.ReadTimeout)) == nil {
			b.rc = rc
		}
		r.Body = b
		next.ServeHTTP(w, r)
		if !b.eof.Load() {
			// Fails on a hijacked connection, whose reads are its owner's.
			_ = rc.SetReadDeadline(time.Now())
		}
	})
}

// eofBody records whether a request body was read to its end, and lifts
// the read deadline then (rc non-nil), so that a slow Kafka write after
// the body does not trip it.
type eofBody struct {
	io.ReadCloser
	rc  *http.ResponseController
	eof atomic.Bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && b.eof.CompareAndSwap(false, true) {
		if b.rc != nil {
			_ = b.rc.SetReadDeadline(time.Time{})
		}
	}
	return n, err
}

// refuseBody answers a request whose body read failed because of a guard
// (in-flight cap: 429; read timeout: 408), in dialect d's shape. It
// reports false for any other error, which the caller answers itself.
func (s *Server) refuseBody(w http.ResponseWriter, d aep.Dialect, err error) bool {
	var status int
	var reason, msg string
	switch {
	case errors.Is(err, errInflightFull):
		status, reason = http.StatusTooManyRequests, "inflight-bytes"
		msg = fmt.Sprintf("%s (%d bytes); retry when earlier requests are answered", errInflightFull, s.cfg.MaxInflightBytesPerTenant)
		w.Header().Set("Retry-After", "1")
	case errors.Is(err, errBodyTimeout):
		status, reason = http.StatusRequestTimeout, "read-timeout"
		msg = fmt.Sprintf("%s: the whole body must arrive within %s", errBodyTimeout, s.cfg.ReadTimeout)
		w.Header().Set("Connection", "close")
	default:
		return false
	}
	s.metrics.rejected(d, reason, 1)
	if d == aep.DialectD {
		writeD(w, status, limitCode(d), msg, status == http.StatusTooManyRequests)
	} else {
		writeR(w, status, limitCode(d), msg)
	}
	return true
}

// guardedBody is a request body read under bodyGuard.
type guardedBody struct {
	io.ReadCloser
	f        *inflight // nil: no cap
	tenant   string
	rc       *http.ResponseController
	deadline bool  // a read deadline is set and must be cleared at the end of the body
	prepaid  bool  // the Content-Length was reserved up front
	reserved int64 // bytes counted against the tenant
	once     sync.Once
}

func (g *guardedBody) Read(p []byte) (int, error) {
	n, err := g.ReadCloser.Read(p)
	if n > 0 && g.f != nil && !g.prepaid {
		if !g.f.acquire(g.tenant, int64(n)) {
			return 0, errInflightFull
		}
		g.reserved += int64(n)
	}
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The deadline stays: net/http then gives up reading the
			// rest of the body after the handler and closes the
			// connection after the response, instead of waiting for it.
			g.once.Do(func() {})
			return n, fmt.Errorf("%w: %w", errBodyTimeout, err)
		}
		g.clearDeadline()
	}
	return n, err
}

// clearDeadline lifts the read deadline once the body is read, so that a
// slow Kafka write after it does not trip the connection's deadline. A
// body that timed out keeps it.
func (g *guardedBody) clearDeadline() {
	g.once.Do(func() {
		if g.deadline {
			_ = g.rc.SetReadDeadline(time.Time{})
		}
	})
}

func (g *guardedBody) releaseAll() {
	g.clearDeadline()
	if g.f != nil {
		g.f.release(g.tenant, g.reserved)
	}
}
