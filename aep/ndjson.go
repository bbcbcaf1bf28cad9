package aep

import (
	"bytes"
	"iter"
)

// Lines iterates over the lines of an NDJSON body (application/x-ndjson),
// yielding each line's 0-based index and its bytes without the terminator:
// lines end with "\n", a "\r" before it is dropped, and the empty remainder
// after a final "\n" is not a line. Any other empty line is yielded (empty),
// so that ParseAs refuses it at its index (JSONL allows no blank lines,
// AEP-0003 §3.1.1). The yielded slices alias body; they are the bytes to
// store. See docs/dialects.md §3.2.7.
func Lines(body []byte) iter.Seq2[int, []byte] {
	return func(yield func(int, []byte) bool) {
		for i := 0; len(body) > 0; i++ {
			line := body
			if j := bytes.IndexByte(body, '\n'); j >= 0 {
				line, body = body[:j], body[j+1:]
			} else {
				body = nil
			}
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			if !yield(i, line) {
				return
			}
		}
	}
}
