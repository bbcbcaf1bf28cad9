package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
)

// appendJSON appends resp as encoding/json writes it (same members, same
// order, same escaping), without reflection: the positions of a large batch
// are most of the response. Errors, rare, go through encoding/json.
func (resp *dIngestResponse) appendJSON(dst []byte) ([]byte, error) {
	dst = append(dst, `{"accepted":`...)
	dst = strconv.AppendInt(dst, int64(resp.Accepted), 10)
	dst = append(dst, `,"rejected":`...)
	dst = strconv.AppendInt(dst, int64(resp.Rejected), 10)
	dst = append(dst, `,"errors":`...)
	if resp.Errors != nil && len(resp.Errors) == 0 {
		dst = append(dst, "[]"...)
	} else {
		errs, err := json.Marshal(resp.Errors)
		if err != nil {
			return dst, err
		}
		dst = append(dst, errs...)
	}
	if resp.Topic != "" {
		dst = append(dst, `,"topic":`...)
		dst = appendJSONString(dst, resp.Topic)
	}
	dst = append(dst, `,"positions":`...)
	if resp.Positions == nil {
		return append(dst, "null}"...), nil
	}
	dst = append(dst, '[')
	for i := range resp.Positions {
		p := &resp.Positions[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"event_index":`...)
		dst = strconv.AppendInt(dst, int64(p.EventIndex), 10)
		dst = append(dst, `,"id":`...)
		dst = appendJSONString(dst, p.ID)
		dst = appendPlace(dst, p.Partition, p.Offset, p.Reused)
	}
	return append(dst, "]}"...), nil
}

// appendJSONString appends s quoted as encoding/json quotes it: printable
// ASCII other than the characters it escapes is copied, anything else is
// left to encoding/json.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always marshals
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// respBufs holds response buffers between requests; one larger than
// maxPooledResp is dropped rather than kept.
var respBufs = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

const maxPooledResp = 256 << 10

// jsonAppender is a response body that appends its own JSON, as
// encoding/json would write it.
type jsonAppender interface {
	appendJSON(dst []byte) ([]byte, error)
}

// writeDIngest writes resp with status as writeJSON would.
func writeDIngest(w http.ResponseWriter, status int, resp *dIngestResponse) {
	writeAppended(w, status, resp)
}

// writeAppended writes v with status as writeJSON would, from a pooled
// buffer; when v cannot append itself, through writeJSON.
func writeAppended(w http.ResponseWriter, status int, v jsonAppender) {
	bp := respBufs.Get().(*[]byte)
	b, err := v.appendJSON((*bp)[:0])
	if err != nil {
		respBufs.Put(bp)
		writeJSON(w, status, v)
		return
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	// Known up front: a body over net/http's 2 KB buffer is then not sent
	// chunked.
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
	if cap(b) <= maxPooledResp {
		*bp = b
		respBufs.Put(bp)
	}
}
