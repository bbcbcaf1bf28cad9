package delivery

import (
	"net/http"
	"time"
)

// sseLoopConfig is how one SSE response is written.
type sseLoopConfig struct {
	Heartbeat    time.Duration // idle time before a ": heartbeat" comment
	WriteTimeout time.Duration // bound on each write
	Batch        int           // most queued elements per write
}

// serveSSE writes the elements of ch to an SSE response until the client
// leaves, a write fails, or ch is closed. Queued elements are encoded by
// appendMsg into one write of at most cfg.Batch elements. When ch is
// closed, onClose (if not nil) may append a last message before the final
// write. An encoding error ends the stream and is returned; every other end
// returns nil. The caller has checked that w supports flushing.
func serveSSE[T any](w http.ResponseWriter, r *http.Request, cfg sseLoopConfig, ch <-chan T,
	appendMsg func([]byte, T) ([]byte, error), onClose func([]byte) []byte) error {
	rc := http.NewResponseController(w)
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(cfg.WriteTimeout)) // unsupported: no deadline
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write([]byte(": stream open\n\n")) {
		return nil
	}
	hb := time.NewTicker(cfg.Heartbeat)
	defer hb.Stop()
	var buf []byte
	idle := true
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-hb.C:
			if idle && !write([]byte(": heartbeat\n\n")) {
				return nil
			}
			idle = true
		case el, ok := <-ch:
			buf = buf[:0]
			var err error
			for n := 0; ok; n++ {
				if buf, err = appendMsg(buf, el); err != nil {
					return err
				}
				if n+1 >= cfg.Batch || len(ch) == 0 {
					break
				}
				el, ok = <-ch
			}
			if !ok && onClose != nil {
				buf = onClose(buf)
			}
			if len(buf) > 0 && !write(buf) {
				return nil
			}
			idle = false
			if !ok {
				return nil
			}
		}
	}
}
