package transport

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// Park: an idle SSE stream that holds no goroutine.
//
// An SSE client sends nothing after its request, so once a stream is set up
// there is nothing to read: ServeSSE hijacks the HTTP/1.x connection,
// writes the status line and the headers the handler and its middleware set
// (with "Connection: close" and no length: the body ends when the
// connection does, which every SSE client accepts), drops net/http's
// buffers and returns, so the handler's goroutine ends. The stream is then
// a parkedSSE: the connection, a netpoll Handle (readable or hung up means
// the client is gone), its queue (whose OnReady hook wakes it), a heartbeat
// timer and the bindings' encoder. Each wake-up (data, heartbeat,
// hang-up, shutdown) starts one goroutine that does what is pending with
// the same batching, encoding, write deadline and AfterWrite as the
// goroutine path, and exits when nothing is left.
//
// Ownership: a parked stream is admitted by its Hub (cfg.Stream), which
// tells it to end on shutdown (last words from cfg.OnShutdown) and waits
// for it to Leave; Leave is part of cfg.Cleanup, which the stream runs
// exactly once when it ends, from the goroutine that ends it. The Hub owns
// the poller: the first parked stream starts it, the last one to end
// closes it.
//
// What changes for the rest of the server: net/http forgets the connection
// (ConnState StateHijacked), so http.Server.Shutdown does not wait for it
// (the Hub does); connlimit keeps counting it until it is closed; the
// middleware that measures a request when its handler returns (access log,
// request metrics) learns through OnPark that the stream parked, and
// measures it when it ends.

// wake-up reasons, pending bits of a parkedSSE.
const (
	wakeData uint8 = 1 << iota
	wakeHeartbeat
	wakeGone
	wakeShutdown
)

// parkedSSE is one parked stream.
type parkedSSE[T any] struct {
	conn      net.Conn
	enders    *runner
	cfg       SSEConfig
	src       Source[T]
	appendMsg func([]byte, T) ([]byte, error)
	onClose   func([]byte) []byte
	cleanup   []func()
	ends      []func(written int64) // the OnPark hooks' ends
	fd        parkedFD              // its place on the Hub's poller, held until the stream ends
	hb        *time.Timer

	// touched only by the goroutine running the stream (running), which
	// the mutex hands from one to the next
	wrote   bool  // elements written since the last heartbeat tick
	written int64 // bytes written to the connection

	mu       sync.Mutex
	pending  uint8         // guarded by mu
	running  bool          // a goroutine runs the stream; guarded by mu
	ended    bool          // guarded by mu
	readDone chan struct{} // off the poller: closed when the reading goroutine returns; guarded by mu
}

// bufPool holds the write buffers of parked streams: one is borrowed per
// wake-up, so an idle stream holds none.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxPooledBuf bounds the buffers returned to bufPool.
const maxPooledBuf = 256 << 10

// park parks the stream if it can (see Park): it reports whether it took
// the stream over, in which case the caller returns at once.
func park[T any](w http.ResponseWriter, r *http.Request, cfg SSEConfig, src Source[T],
	appendMsg func([]byte, T) ([]byte, error), onClose func([]byte) []byte) bool {
	if cfg.Stream == nil || cfg.Cleanup == nil || r.ProtoMajor != 1 || r.TLS != nil {
		return false
	}
	nf, ok := src.(notifier)
	if !ok {
		return false
	}
	hub := cfg.Stream.h
	ps := hub.acquirePoller()
	if ps == nil {
		return false
	}
	head := responseHead(w.Header())
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		hub.releasePoller(ps)
		return false // not hijackable (a wrapper that hides it): the goroutine path
	}
	_ = conn.SetDeadline(time.Time{}) // net/http's read deadline, if any, is ours to clear
	dropBuffers(brw)
	p := &parkedSSE[T]{conn: conn, enders: &cfg.Stream.h.enders, cfg: cfg, src: src, appendMsg: appendMsg, onClose: onClose}
	p.fd.init(ps, p)
	bp := bufPool.Get().(*[]byte)
	b := append(append(append((*bp)[:0], head...), cfg.Preamble...), ": stream open\n\n"...)
	ok = p.write(b)
	putBuf(bp, b)
	if !ok {
		_ = conn.Close()
		hub.releasePoller(ps)
		if cfg.AfterWrite != nil {
			cfg.AfterWrite(false)
		}
		return true // the caller's Cleanup runs as it returns
	}
	p.written -= int64(len(head)) // the hooks count the body
	p.cleanup = cfg.Cleanup.take()
	p.ends = runParkHooks(r.Context())
	p.running = true // until registered: wake-ups only mark pending
	p.watch(sc(conn))
	p.hb = time.AfterFunc(cfg.Heartbeat, func() { p.wake(wakeHeartbeat) })
	cfg.Stream.OnShutdown(func() { p.wake(wakeShutdown) })
	nf.OnReady(func() { p.wake(wakeData) })
	p.mu.Lock()
	why := p.pending
	p.running = why != 0
	p.mu.Unlock()
	if why != 0 {
		p.start(why)
	}
	return true
}

// sc is conn's descriptor, nil when it has none.
func sc(conn net.Conn) syscall.Conn {
	s, _ := conn.(syscall.Conn)
	return s
}

// watch puts the stream on the poller to learn that the client left, or
// reads for it (watchByReading) when the poller cannot watch the
// connection or has failed. The stream is not running yet (park holds it).
func (p *parkedSSE[T]) watch(s syscall.Conn) {
	if s == nil {
		p.mu.Lock()
		p.watchByReadingLocked()
		p.mu.Unlock()
		return
	}
	if err := p.fd.add(s, func() { p.wake(wakeGone) }); err != nil {
		p.mu.Lock()
		p.watchByReadingLocked()
		p.mu.Unlock()
	}
}

// watchByReadingLocked learns that the client left the way net/http does,
// with a goroutine blocked in Read: for a connection the poller cannot
// watch (one without a descriptor) or once the poller failed. end closes
// the connection and waits for it. Must hold p.mu.
func (p *parkedSSE[T]) watchByReadingLocked() {
	done := make(chan struct{})
	p.readDone = done
	go func() {
		defer close(done)
		var b [1]byte
		_, _ = p.conn.Read(b[:])
		p.wake(wakeGone)
	}()
}

// unpark moves the stream off the failed poller: a goroutine reads to
// learn that the client left, the rest goes on as before.
func (p *parkedSSE[T]) unpark() {
	if !p.fd.leave() {
		return // ending: end took it off
	}
	p.mu.Lock()
	if !p.ended { // else end has read readDone: nothing to read for
		p.watchByReadingLocked()
	}
	p.mu.Unlock()
}

// responseHead is the status line and headers of a parked stream's
// response: h (what the handler and middleware set), the date, and a body
// delimited by the connection's end.
func responseHead(h http.Header) []byte {
	b := []byte("HTTP/1.1 200 OK\r\n")
	h = h.Clone()
	h.Del("Content-Length")
	h.Del("Transfer-Encoding")
	h.Set("Connection", "close")
	if _, ok := h["Date"]; !ok {
		h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	}
	w := byteWriter{b: b}
	_ = h.Write(&w)
	return append(w.b, "\r\n"...)
}

type byteWriter struct{ b []byte }

func (w *byteWriter) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

// dropBuffers lets go of net/http's reader and writer: what the reader
// holds past the request (an SSE client sends nothing more) is ignored.
func dropBuffers(brw *bufio.ReadWriter) {
	if brw == nil {
		return
	}
	brw.Reader.Reset(nil)
	brw.Writer.Reset(nil)
}

func putBuf(bp *[]byte, b []byte) {
	if cap(b) > maxPooledBuf {
		return
	}
	*bp = b[:0]
	bufPool.Put(bp)
}

// wake marks why the stream must act and starts a goroutine to do it
// unless one runs. It never blocks: the poller, the queue's producers and
// the timer call it.
func (p *parkedSSE[T]) wake(why uint8) {
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return
	}
	p.pending |= why
	start := !p.running
	p.running = true
	p.mu.Unlock()
	if start {
		p.start(why)
	}
}

// start runs the stream: a client that left is ended by the Hub's few
// enders (a storm of hang-ups must not start a goroutine each); writes,
// which may block up to the write timeout on a slow client, get a
// goroutine of their own, so one slow client never delays another.
func (p *parkedSSE[T]) start(why uint8) {
	if why&wakeGone != 0 {
		p.enders.do(p.run)
		return
	}
	p.cfg.Stream.h.wakers.Go(p.run)
}

// run does what is pending until nothing is, then exits; or ends the
// stream.
func (p *parkedSSE[T]) run() {
	for {
		p.mu.Lock()
		why := p.pending
		p.pending = 0
		if why == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		if !p.act(why) {
			p.end()
			return
		}
	}
}

// act does what why asks; false ends the stream.
func (p *parkedSSE[T]) act(why uint8) bool {
	switch {
	case why&wakeGone != 0:
		return false
	case why&wakeShutdown != 0:
		if p.cfg.OnShutdown != nil {
			bp := bufPool.Get().(*[]byte)
			b := p.cfg.OnShutdown((*bp)[:0])
			if len(b) > 0 {
				p.write(b)
			}
			putBuf(bp, b)
		}
		return false
	}
	if why&wakeData != 0 && !p.drain() {
		return false
	}
	if why&wakeHeartbeat != 0 {
		if !p.wrote && !p.write([]byte(": "+p.cfg.HeartbeatComment+"\n\n")) {
			return false
		}
		p.wrote = false
		p.hb.Reset(p.cfg.Heartbeat)
	}
	return true
}

// drain writes what the source holds, cfg.Batch elements a write, as the
// goroutine path does; false ends the stream.
func (p *parkedSSE[T]) drain() bool {
	bp := bufPool.Get().(*[]byte)
	buf := (*bp)[:0]
	defer func() { putBuf(bp, buf) }()
	for {
		buf = buf[:0]
		ended, n := false, 0
		for ; n < p.cfg.Batch; n++ {
			el, ok, end := p.src.Next()
			if !ok {
				ended = end
				break
			}
			var err error
			if buf, err = p.appendMsg(buf, el); err != nil {
				if errors.Is(err, ErrEnd) {
					if len(buf) > 0 {
						wrote(p.cfg, p.write(buf))
					}
				} else if p.cfg.OnError != nil {
					p.cfg.OnError(err)
				}
				return false
			}
		}
		if ended && p.onClose != nil {
			buf = p.onClose(buf)
		}
		if len(buf) > 0 {
			if !wrote(p.cfg, p.write(buf)) {
				return false
			}
			p.wrote = true
		}
		if ended {
			return false
		}
		if n < p.cfg.Batch {
			return true // drained; the OnReady hook wakes the stream again
		}
	}
}

// write writes b under the write deadline (in pieces, for a source with
// a WriteDeadline: writeLeased).
func (p *parkedSSE[T]) write(b []byte) bool {
	return writeLeased(p.src, b, func(b []byte) bool {
		_ = p.conn.SetWriteDeadline(writeDeadline(p.src, p.cfg.WriteTimeout))
		n, err := p.conn.Write(b)
		p.written += int64(n)
		return err == nil
	})
}

// end ends the stream once: no more wake-ups, the connection closed (the
// client reads the end of the body), then the binding's cleanup (the
// Hub's Leave among it) in this goroutine.
func (p *parkedSSE[T]) end() {
	p.mu.Lock()
	p.ended = true
	readDone := p.readDone
	p.mu.Unlock()
	if nf, ok := p.src.(notifier); ok {
		nf.OnReady(nil)
	}
	p.hb.Stop()
	p.fd.leave() // before Close: the number may be reused at once
	_ = p.conn.Close()
	if readDone != nil {
		<-readDone
	}
	p.fd.release()
	if p.cfg.AfterWrite != nil {
		p.cfg.AfterWrite(false)
	}
	runAll(p.cleanup)
	for _, end := range p.ends {
		end(p.written)
	}
}
