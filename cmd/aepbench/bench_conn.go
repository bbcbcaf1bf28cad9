package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/internal/aepclient"
)

// connSender posts batches over plain-HTTP keep-alive connections it holds
// itself, one per request in flight: it writes the request head it built
// once and the body, and reads the answer with http.ReadResponse. Through
// net/http's Transport each request crosses two more goroutines (the
// connection's read and write loops); on a machine the gateway shares that
// cost aepctl more CPU per event than franz-go costs the baseline phase,
// CPU the gateway then lacks. The answers are read as httpSender reads
// them (decodeResult). Safe for concurrent use; close ends every idle
// connection.
type connSender struct {
	addr string      // host:port
	head []byte      // request line and headers up to Content-Length's value
	idle chan *bconn // idle connections, at most one per worker
}

type bconn struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

// newConnSender returns a connSender for an http:// base URL, or false for
// any other (https goes through net/http).
func newConnSender(base, token string, d aep.Dialect, workers int) (*connSender, bool) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, false
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	path := u.EscapedPath()
	for len(path) > 0 && path[len(path)-1] == '/' {
		path = path[:len(path)-1]
	}
	head := "POST " + path + aepclient.Endpoint(d) + " HTTP/1.1\r\nHost: " + u.Host + "\r\nUser-Agent: aepctl-bench\r\nContent-Type: application/x-ndjson\r\n"
	if d == aep.DialectR {
		head += aep.HeaderAEPVersion + ": " + aep.SupportedVersions(aep.DialectR)[0] + "\r\n"
	}
	if token != "" {
		head += "Authorization: Bearer " + token + "\r\n"
	}
	head += "Content-Length: "
	return &connSender{addr: host, head: []byte(head), idle: make(chan *bconn, workers)}, true
}

func (s *connSender) send(ctx context.Context, b *loadBatch) outcome {
	n := len(b.lines)
	res, err := s.post(ctx, b.body, n)
	if err != nil {
		return outcome{failed: n, status: "error"}
	}
	return httpOutcome(res, n)
}

// post sends one request on an idle connection or a new one and reads the
// answer; a connection that failed, or that the server will close, is
// closed instead of kept.
func (s *connSender) post(ctx context.Context, body []byte, n int) (aepclient.Result, error) {
	var bc *bconn
	select {
	case bc = <-s.idle:
	default:
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", s.addr)
		if err != nil {
			return aepclient.Result{}, fmt.Errorf("dial %s: %w", s.addr, err)
		}
		bc = &bconn{c: c, r: bufio.NewReaderSize(c, 16<<10), w: bufio.NewWriterSize(c, 16<<10)}
	}
	res, keep, err := bc.roundTrip(ctx, s.head, body, n)
	if err != nil || !keep {
		bc.c.Close()
		return res, err
	}
	select {
	case s.idle <- bc:
	default:
		bc.c.Close()
	}
	return res, nil
}

func (bc *bconn) roundTrip(ctx context.Context, head, body []byte, n int) (aepclient.Result, bool, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(defaultReqTimeout)
	}
	if err := bc.c.SetDeadline(deadline); err != nil {
		return aepclient.Result{}, false, err
	}
	// Cancelling ctx (the run ends early) unblocks the connection at once.
	stop := context.AfterFunc(ctx, func() { _ = bc.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	// bufio.Writer keeps its first error and Flush returns it.
	_, _ = bc.w.Write(head)
	_, _ = bc.w.WriteString(strconv.Itoa(len(body)))
	_, _ = bc.w.WriteString("\r\n\r\n")
	_, _ = bc.w.Write(body)
	if err := bc.w.Flush(); err != nil {
		return aepclient.Result{}, false, fmt.Errorf("write request: %w", err)
	}
	resp, err := http.ReadResponse(bc.r, nil)
	if err != nil {
		return aepclient.Result{}, false, fmt.Errorf("read response: %w", err)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	resp.Body.Close()
	if err != nil {
		return aepclient.Result{}, false, fmt.Errorf("read response: %w", err)
	}
	res := aepclient.DecodeResult(resp.StatusCode, raw, n)
	res.Attempts = 1
	return res, !resp.Close, nil
}

// close ends the idle connections; call it once no send is running.
func (s *connSender) close() {
	for {
		select {
		case bc := <-s.idle:
			bc.c.Close()
		default:
			return
		}
	}
}
