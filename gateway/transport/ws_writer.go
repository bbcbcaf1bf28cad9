package transport

import "sync"

// maxRun is the most queued messages written with one write; maxRunBytes
// ends a run early once its buffer holds that much.
const (
	maxRun      = 64
	maxRunBytes = 256 << 10
)

// wsBufs holds write buffers between runs, so that an idle connection
// holds none.
var wsBufs = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// kickWriter runs the writer unless it is running (then it runs once more
// when done): the queue's OnReady, and urgent closes.
func (c *Conn) kickWriter() {
	if c.serving.Load() {
		c.writing.kick(c, c.writeAll)
	}
}

// writeAll writes what is queued, an urgent close first, until the queue
// is empty or the writer stops (a close written, a write failed).
func (c *Conn) writeAll() {
	for {
		c.life.Lock()
		stopped := c.wstop
		c.life.Unlock()
		if stopped {
			return
		}
		if it := c.urgent.Swap(nil); it != nil {
			c.w.closeWith(*it)
			c.stopWriter()
			return
		}
		n, more := c.w.run()
		if !more {
			c.stopWriter()
			return
		}
		if n == 0 {
			return
		}
	}
}

// wsWriter is the writer's state (one writer runs at a time).
type wsWriter struct {
	c     *Conn
	buf   *[]byte
	metas []any
}

// get returns an empty buffer from the pool; flush or put gives it back.
func (w *wsWriter) get() []byte {
	w.buf = wsBufs.Get().(*[]byte)
	return (*w.buf)[:0]
}

func (w *wsWriter) put(b []byte) {
	if cap(b) <= 1<<20 {
		*w.buf = b[:0]
		wsBufs.Put(w.buf)
	}
	w.buf = nil
}

// flush writes b (from get) with one write and gives the buffer back;
// false when the write failed (the socket is then closed).
func (w *wsWriter) flush(b []byte, closes bool) bool {
	err := w.c.ws.Write(b, w.c.cfg.WriteTimeout, closes)
	w.put(b)
	if err != nil {
		w.c.log.Debug().Err(err).Msg("transport: websocket write")
		return false
	}
	return true
}

// run appends what is queued (up to maxRun messages or maxRunBytes) as
// frames to one buffer, writes it with one write and hands the metas
// written to WSConfig.Written. n is the messages taken; more is false when
// the writer must stop (a write failed or a close was written).
func (w *wsWriter) run() (n int, more bool) {
	c := w.c
	b := w.get()
	var took int64
	defer func() { c.tookBytes(took) }()
	for ; n < maxRun && len(b) < maxRunBytes && c.urgent.Load() == nil; n++ {
		it, ok, _ := c.out.Next()
		if !ok {
			break
		}
		took += int64(len(it.Msg))
		if len(it.Msg) > 0 {
			b = AppendFrame(b, opText, it.Msg)
			if it.Meta != nil && c.cfg.Written != nil {
				w.metas = append(w.metas, it.Meta)
			}
		}
		if it.end != nil {
			w.written(w.flush(w.appendClose(b, it.end), true))
			return n + 1, false
		}
	}
	if len(b) == 0 {
		w.put(b)
		return n, true
	}
	ok := w.flush(b, false)
	w.written(ok)
	return n, ok
}

// written hands the metas of a run to WSConfig.Written when it was
// written, and forgets them.
func (w *wsWriter) written(ok bool) {
	if ok {
		for _, m := range w.metas {
			w.c.cfg.Written(m)
		}
	}
	clear(w.metas)
	w.metas = w.metas[:0]
}

// appendClose appends the Closing message and the close frame of end.
func (w *wsWriter) appendClose(b []byte, end *closeFrame) []byte {
	if f := w.c.cfg.Closing; f != nil {
		if m := f(end.reason); len(m) > 0 {
			b = AppendFrame(b, opText, m)
		}
	}
	return appendClose(b, end.status, end.reason)
}

// closeWith writes it.Msg, the Closing message and the close frame with
// one write.
func (w *wsWriter) closeWith(it Item) {
	b := w.get()
	if len(it.Msg) > 0 {
		b = AppendFrame(b, opText, it.Msg)
	}
	w.flush(w.appendClose(b, it.end), true)
}
