package transport

import (
	"errors"
	"net/http"
	"time"
)

// ErrEnd, returned (possibly wrapped) by ServeSSE's appendMsg, ends the
// stream cleanly after writing what appendMsg appended: a stream that has
// delivered all it was asked for (dialect R's live=0).
var ErrEnd = errors.New("transport: end of stream")

// SSEConfig is how one SSE response is written. Zero fields mean the
// defaults named.
type SSEConfig struct {
	// Heartbeat is the idle time after which a comment is written so that
	// proxies and clients see the stream alive. Zero means 15s.
	Heartbeat time.Duration
	// HeartbeatComment is that comment's text. Empty means "heartbeat".
	HeartbeatComment string
	// WriteTimeout bounds each write; a write that does not finish in time
	// ends the stream. Zero means 10s.
	WriteTimeout time.Duration
	// Batch is the most queued elements one write carries. Zero means 64.
	Batch int
	// Preamble is written before the ": stream open" comment (markers a
	// dialect owes the client before any event).
	Preamble []byte
	// Shutdown, when closed, ends the stream: OnShutdown (if not nil) may
	// append last words (a closing comment) before the final write.
	Shutdown   <-chan struct{}
	OnShutdown func([]byte) []byte
	// AfterWrite, when not nil, is called after each write of encoded
	// elements with whether it succeeded, and once more with false when
	// the stream ends (per-delivery tracing spans end there).
	AfterWrite func(ok bool)
	// OnError, when not nil, is told of an encoding error that ended the
	// stream (a parked stream has no caller left to return it to).
	OnError func(error)
	// Stream and Cleanup, both set, let ServeSSE park the stream where it
	// can (see Park): Stream is the stream's admission (its Hub ends it on
	// shutdown and owns the poller), Cleanup what its end owes (Leave,
	// unsubscribe), run exactly once, by the parked stream when it ends or
	// by the caller's deferred Cleanup.Run when ServeSSE did not park.
	// Either nil: the stream runs in the caller's goroutine.
	Stream  *Stream
	Cleanup *Cleanup
}

func (c SSEConfig) withDefaults() SSEConfig {
	if c.Heartbeat <= 0 {
		c.Heartbeat = 15 * time.Second
	}
	if c.HeartbeatComment == "" {
		c.HeartbeatComment = "heartbeat"
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.Batch <= 0 {
		c.Batch = 64
	}
	return c
}

// CanStream reports whether w can flush, which an SSE response needs.
func CanStream(w http.ResponseWriter) bool {
	_, ok := w.(http.Flusher)
	return ok
}

// StartSSE sets the headers of an event stream: Cache-Control: no-cache,
// as dialect D's transport-sse.md requires of a stream (and as the SSE
// specification's examples send), not buffered by proxies
// (X-Accel-Buffering). ServeSSE writes them with the 200, on the response
// or, for a parked stream, on the hijacked connection.
func StartSSE(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
}

// Source is what ServeSSE drains: a bounded queue with one consumer
// (*queue.Queue satisfies it).
type Source[T any] interface {
	// Ready receives a token when Next may return an element or the end.
	Ready() <-chan struct{}
	// Next removes and returns the oldest element (ok); with ok false,
	// ended says that nothing will ever come again.
	Next() (el T, ok, ended bool)
}

// writeDeadliner is the optional capability of a Source whose elements
// must not reach the client after some moment (a durable stream's lease):
// each write's deadline is then the earlier of that moment and
// WriteTimeout from now.
type writeDeadliner interface {
	WriteDeadline() time.Time
}

// writeDeadline is the deadline of a write that starts now.
func writeDeadline(src any, timeout time.Duration) time.Time {
	dl := time.Now().Add(timeout)
	if d, ok := src.(writeDeadliner); ok {
		if end := d.WriteDeadline(); end.Before(dl) {
			return end
		}
	}
	return dl
}

// LeasedChunk bounds one write syscall of a Source with a WriteDeadline:
// a write is cut into pieces of at most LeasedChunk bytes and the deadline
// is checked before each, so a process stopped in the middle of a write
// (SIGSTOP, a frozen VM) and woken after the deadline sends at most the
// piece that was under way, never the rest of the batch.
const LeasedChunk = 16 << 10

// writeLeased writes b through write, in pieces of at most LeasedChunk
// bytes, checking src's WriteDeadline before each, when src has one;
// otherwise in one write.
func writeLeased(src any, b []byte, write func([]byte) bool) bool {
	d, ok := src.(writeDeadliner)
	if !ok {
		return write(b)
	}
	for len(b) > 0 {
		if !time.Now().Before(d.WriteDeadline()) {
			return false
		}
		n := min(len(b), LeasedChunk)
		if !write(b[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// notifier is the optional capability of a Source that a parked stream
// needs: fn called (without blocking) whenever Ready would receive a
// token, and once at once if it already would (*queue.Queue.OnReady).
type notifier interface {
	OnReady(fn func())
}

// ServeSSE writes the elements of src to an SSE response (after StartSSE)
// until the client leaves, a write fails, cfg.Shutdown is closed (or, for a
// parked stream, the Hub of cfg.Stream shuts down) or src ends. Queued
// elements are encoded by appendMsg (which may append nothing for an
// element the client does not see) into one write of at most cfg.Batch
// elements, each write bounded by cfg.WriteTimeout; appendMsg returning
// ErrEnd ends the stream after a last write. When src ends, onClose (if not
// nil) may append last words before the final write. An encoding error
// ends the stream, goes to cfg.OnError and is returned (nil once parked);
// every other end returns nil.
//
// With cfg.Stream and cfg.Cleanup set, on an HTTP/1.x connection without
// TLS where the Hub has a poller (Linux), ServeSSE parks the stream (see
// Park) and returns at once: the stream goes on holding no goroutine while
// idle. Otherwise it runs in the caller's goroutine and starts none.
func ServeSSE[T any](w http.ResponseWriter, r *http.Request, cfg SSEConfig, src Source[T],
	appendMsg func([]byte, T) ([]byte, error), onClose func([]byte) []byte) error {
	cfg = cfg.withDefaults()
	if park(w, r, cfg, src, appendMsg, onClose) {
		return nil
	}
	if cfg.AfterWrite != nil {
		defer cfg.AfterWrite(false)
	}
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	// net/http ends the response (its last chunk) after the handler
	// returns, under the connection's write deadline: leave it a fresh one,
	// or a stream that was idle longer than WriteTimeout is cut off
	// instead of ended.
	defer func() { _ = rc.SetWriteDeadline(time.Now().Add(cfg.WriteTimeout)) }()
	// HTTP/2 resets a stream when its write deadline passes, written to
	// or not (HTTP/1.1's only fails a write under way): there the deadline
	// is lifted after each write, or an idle stream would be cut off
	// WriteTimeout after its last event (a browser's EventSource then sees
	// ERR_HTTP2_PROTOCOL_ERROR).
	h2 := r.ProtoMajor >= 2
	writeOnce := func(b []byte) bool {
		_ = rc.SetWriteDeadline(writeDeadline(src, cfg.WriteTimeout)) // unsupported: no deadline
		if _, err := w.Write(b); err != nil {
			return false
		}
		if rc.Flush() != nil {
			return false
		}
		if h2 {
			_ = rc.SetWriteDeadline(time.Time{})
		}
		return true
	}
	write := func(b []byte) bool { return writeLeased(src, b, writeOnce) }
	buf := append(append([]byte(nil), cfg.Preamble...), ": stream open\n\n"...)
	if !write(buf) {
		return nil
	}
	heartbeat := []byte(": " + cfg.HeartbeatComment + "\n\n")
	hb := time.NewTicker(cfg.Heartbeat)
	defer hb.Stop()
	idle := true
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-cfg.Shutdown:
			if cfg.OnShutdown != nil {
				if b := cfg.OnShutdown(buf[:0]); len(b) > 0 {
					write(b)
				}
			}
			return nil
		case <-hb.C:
			if idle && !write(heartbeat) {
				return nil
			}
			idle = true
		case <-src.Ready():
			buf = buf[:0]
			ended := false
			for n := 0; n < cfg.Batch; n++ {
				el, ok, end := src.Next()
				if !ok {
					ended = end
					break
				}
				var err error
				if buf, err = appendMsg(buf, el); err != nil {
					if errors.Is(err, ErrEnd) {
						if len(buf) > 0 {
							wrote(cfg, write(buf))
						}
						return nil
					}
					if cfg.OnError != nil {
						cfg.OnError(err)
					}
					return err
				}
			}
			if ended && onClose != nil {
				buf = onClose(buf)
			}
			if len(buf) > 0 {
				if !wrote(cfg, write(buf)) {
					return nil
				}
				idle = false
			}
			if ended {
				return nil
			}
		}
	}
}

// wrote tells cfg.AfterWrite the outcome ok of a write of elements and
// returns it.
func wrote(cfg SSEConfig, ok bool) bool {
	if cfg.AfterWrite != nil {
		cfg.AfterWrite(ok)
	}
	return ok
}
