package aepclient

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// MaxSSELine bounds one line of an SSE stream (a data: line holds one event;
// the gateway's default event limit is 1 MiB, its largest configurable one
// well under this).
const MaxSSELine = 16 << 20

// SSEMessage is one dispatched SSE message, or one comment line.
type SSEMessage struct {
	Event   string // the event: field ("" means "message")
	ID      string // the id: field of this message ("" when it had none)
	Data    []byte // data: lines joined with "\n"
	Comment string // set (and nothing else) for a ": ..." comment line
}

// sseReader parses text/event-stream (the WHATWG grammar, minus retry:, which
// aepctl does not use). It is owned by one goroutine.
type sseReader struct {
	r   *bufio.Reader
	max int
}

func NewSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 64<<10), max: MaxSSELine}
}

var errSSELineTooLong = errors.New("SSE line too long")

// Next returns the next message or comment. io.EOF means the stream ended
// between messages; a message cut by the end of the stream is dropped, as
// the SSE rules say.
func (s *sseReader) Next() (SSEMessage, error) {
	var m SSEMessage
	var data [][]byte
	hasData := false
	for {
		line, err := s.line()
		if err != nil {
			return SSEMessage{}, err
		}
		if len(line) == 0 { // dispatch
			if !hasData {
				m = SSEMessage{}
				continue
			}
			m.Data = bytes.Join(data, []byte("\n"))
			return m, nil
		}
		if line[0] == ':' {
			return SSEMessage{Comment: string(bytes.TrimPrefix(line[1:], []byte(" ")))}, nil
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			m.Event = string(value)
		case "id":
			m.ID = string(value)
		case "data":
			data = append(data, append([]byte(nil), value...))
			hasData = true
		}
	}
}

// line reads one line without its terminator (LF, CRLF; a lone CR is not
// used by the gateway and is kept as data).
func (s *sseReader) line() ([]byte, error) {
	var buf []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		if len(buf)+len(chunk) > s.max {
			return nil, fmt.Errorf("%w (over %d bytes)", errSSELineTooLong, s.max)
		}
		buf = append(buf, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return nil, err // a line cut by the end of the stream is dropped
		}
		buf = bytes.TrimSuffix(buf[:len(buf)-1], []byte("\r"))
		return buf, nil
	}
}
