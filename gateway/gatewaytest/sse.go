package gatewaytest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// SSEMessage is one message of an event stream: the fields up to a blank
// line. A message of comments only (": ping", ": heartbeat") has no fields.
type SSEMessage struct {
	Comments []string // comment lines, without the leading ":" and one space
	Event    string
	Data     string // data lines joined with "\n"
	ID       string
	HasID    bool // an id: line was present (possibly empty)
	HasData  bool
}

// Comment is the message's first comment, "" when it has none.
func (m SSEMessage) Comment() string {
	if len(m.Comments) == 0 {
		return ""
	}
	return m.Comments[0]
}

// IsComment says the message carries comments and no field.
func (m SSEMessage) IsComment() bool {
	return len(m.Comments) > 0 && !m.HasData && !m.HasID && m.Event == ""
}

// MaxSSELine bounds one line ParseSSE accepts.
const MaxSSELine = 4 << 20

// ParseSSE reads an event stream (the WHATWG EventSource format: LF, CRLF
// or CR line ends; "field: value" with one optional space; lines starting
// with ":" are comments) and calls emit with each message, at each blank
// line that ends a non-empty one, until emit returns false or r ends. It
// returns nil at the end of r or when emit stops it, and the read error
// otherwise; a line longer than MaxSSELine is an error. Unknown fields are
// kept as a comment "UNKNOWN <line>" so a test sees them.
func ParseSSE(r io.Reader, emit func(SSEMessage) bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxSSELine)
	sc.Split(scanSSELines)
	var m SSEMessage
	empty := true
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if !empty && !emit(m) {
				return nil
			}
			m, empty = SSEMessage{}, true
			continue
		}
		empty = false
		if strings.HasPrefix(line, ":") {
			m.Comments = append(m.Comments, strings.TrimPrefix(line[1:], " "))
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			m.Event = value
		case "data":
			if m.HasData {
				m.Data += "\n"
			}
			m.Data += value
			m.HasData = true
		case "id":
			m.ID, m.HasID = value, true
		default:
			m.Comments = append(m.Comments, "UNKNOWN "+line)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("sse: %w", err)
	}
	return nil
}

// scanSSELines splits at LF, CRLF or a lone CR.
func scanSSELines(data []byte, atEOF bool) (int, []byte, error) {
	i := bytes.IndexAny(data, "\r\n")
	switch {
	case i < 0:
		if atEOF && len(data) > 0 {
			return len(data), data, nil
		}
		return 0, nil, nil
	case data[i] == '\n':
		return i + 1, data[:i], nil
	case i+1 < len(data):
		if data[i+1] == '\n' {
			return i + 2, data[:i], nil
		}
		return i + 1, data[:i], nil
	case atEOF:
		return i + 1, data[:i], nil
	default:
		return 0, nil, nil // a CR at the end of the buffer: is LF next?
	}
}

// SSEOptions tune OpenSSE.
type SSEOptions struct {
	// Client sends the request; nil means http.DefaultClient.
	Client *http.Client
	// Header is added to the request (Accept: text/event-stream is set).
	Header http.Header
	// Buffer is how many parsed messages the reader holds ahead of the
	// test. Zero means none: the socket is read as fast as the test takes
	// messages, so a test that stops reading stalls the stream.
	Buffer int
}

// SSEStream is an event stream being read by a goroutine it owns; Close
// (also run by tb's cleanup) stops that goroutine and waits for it.
type SSEStream struct {
	tb   testing.TB
	Resp *http.Response
	msgs chan SSEMessage
	quit chan struct{} // closed by Close
	done chan struct{} // closed when the reader has returned
	err  error         // why reading ended; read after done closes
	once sync.Once
}

// OpenSSE sends GET url. On 200 with Content-Type text/event-stream it
// returns the stream being read; on another status it returns nil and the
// response, whose body the caller reads and closes. A transport error or a
// 200 of another content type fails tb.
func OpenSSE(tb testing.TB, url string, o SSEOptions) (*SSEStream, *http.Response) {
	tb.Helper()
	resp := RequestSSE(tb, url, o)
	if resp.StatusCode != http.StatusOK {
		return nil, resp
	}
	return NewSSEStream(tb, resp, o.Buffer), resp
}

// RequestSSE sends GET url as OpenSSE does and returns the response
// unread, for a benchmark that reads the raw stream itself; closing its
// body ends the request. A transport error or a 200 whose Content-Type is
// not text/event-stream fails tb. o.Buffer is ignored.
func RequestSSE(tb testing.TB, url string, o SSEOptions) *http.Response {
	tb.Helper()
	cl := o.Client
	if cl == nil {
		cl = http.DefaultClient
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	for k, vs := range o.Header {
		req.Header[k] = vs
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := cl.Do(req)
	if err != nil {
		cancel()
		tb.Fatalf("GET %s: %v", url, err)
	}
	resp.Body = cancelOnClose{resp.Body, cancel}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode == http.StatusOK && !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		tb.Fatalf("GET %s: Content-Type %q", url, ct)
	}
	return resp
}

// NewSSEStream reads the event stream of resp (a 200 the caller checked)
// with buffer messages read ahead of the test (see SSEOptions.Buffer).
// Close, also run by tb's cleanup, closes the body.
func NewSSEStream(tb testing.TB, resp *http.Response, buffer int) *SSEStream {
	s := &SSEStream{tb: tb, Resp: resp, msgs: make(chan SSEMessage, buffer), quit: make(chan struct{}), done: make(chan struct{})}
	go s.read()
	tb.Cleanup(s.Close)
	return s
}

// cancelOnClose ends a request when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// MustOpenSSE is OpenSSE failing tb on a status other than 200.
func MustOpenSSE(tb testing.TB, url string, o SSEOptions) *SSEStream {
	tb.Helper()
	s, resp := OpenSSE(tb, url, o)
	if s == nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		tb.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return s
}

func (s *SSEStream) read() {
	defer close(s.done)
	defer close(s.msgs)
	s.err = ParseSSE(s.Resp.Body, func(m SSEMessage) bool {
		select {
		case s.msgs <- m:
			return true
		case <-s.quit:
			return false
		}
	})
}

// Close ends the request and waits for the reader; idempotent.
func (s *SSEStream) Close() {
	s.once.Do(func() {
		close(s.quit)
		s.Resp.Body.Close()
	})
	<-s.done
}

// ErrEnded is in the chain of a TryNext error when the stream or
// connection ended; other TryNext errors mean nothing came in time.
var ErrEnded = errors.New("ended")

// TryNext returns the next message within d; an error says the stream
// ended (ErrEnded, with why) or nothing came in time.
func (s *SSEStream) TryNext(d time.Duration) (SSEMessage, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case m, ok := <-s.msgs:
		if !ok {
			if s.err != nil {
				return SSEMessage{}, fmt.Errorf("stream %w: %w", ErrEnded, s.err)
			}
			return SSEMessage{}, fmt.Errorf("stream %w", ErrEnded)
		}
		return m, nil
	case <-t.C:
		return SSEMessage{}, fmt.Errorf("no SSE message within %v", d)
	}
}

// Next returns the next message, failing tb if the stream ends or nothing
// comes within Wait.
func (s *SSEStream) Next() SSEMessage {
	s.tb.Helper()
	m, err := s.TryNext(Wait)
	if err != nil {
		s.tb.Fatal(err)
	}
	return m
}

// NextSkipping returns the next message, skipping comment-only messages
// whose comment is one of skip (heartbeats, pings); it fails tb as Next does.
func (s *SSEStream) NextSkipping(skip ...string) SSEMessage {
	s.tb.Helper()
	for {
		m := s.Next()
		if !m.IsComment() || !slices.Contains(skip, m.Comment()) {
			return m
		}
	}
}

// NextN returns the next n messages.
func (s *SSEStream) NextN(n int) []SSEMessage {
	s.tb.Helper()
	out := make([]SSEMessage, 0, n)
	for range n {
		out = append(out, s.Next())
	}
	return out
}

// Until reads messages until one satisfies match and returns them all, the
// matching one last; what names it in the failure message.
func (s *SSEStream) Until(what string, match func(SSEMessage) bool) []SSEMessage {
	s.tb.Helper()
	var out []SSEMessage
	for {
		m, err := s.TryNext(Wait)
		if err != nil {
			s.tb.Fatalf("waiting for %s after %d messages: %v", what, len(out), err)
		}
		out = append(out, m)
		if match(m) {
			return out
		}
	}
}

// End reads the rest of the stream and returns it, failing tb if the
// stream has not ended within d. The error is why reading ended (nil: the
// response body ended cleanly).
func (s *SSEStream) End(d time.Duration) ([]SSEMessage, error) {
	s.tb.Helper()
	deadline := time.Now().Add(d)
	var out []SSEMessage
	for {
		m, err := s.TryNext(time.Until(deadline))
		if errors.Is(err, ErrEnded) {
			return out, s.err
		}
		if err != nil {
			s.tb.Fatalf("stream still open after %v (%d messages read)", d, len(out))
		}
		out = append(out, m)
	}
}
