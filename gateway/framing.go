package gateway

import (
	"bytes"
	"errors"
	"fmt"
)

// frame is one event's bytes inside a request body with its place in it.
type frame struct {
	index int    // 0-based position among the events of the body
	line  int    // 1-based physical line in the body (NDJSON); 1 for JSON bodies
	raw   []byte // the event bytes, aliasing the body
	// oversize is set, and raw is nil, when the event is over the
	// per-event limit; size is its length.
	oversize bool
	size     int
}

func (f frame) oversizeMessage(max int) string {
	return fmt.Sprintf("event is %d bytes, over the %d-byte limit", f.size, max)
}

// framingError is a body that cannot be split into events at all.
type framingError struct {
	index, line int
	tooMany     bool // the body holds more events than the batch limit
	msg         string
}

func (e *framingError) Error() string { return e.msg }

var errEmptyBody = errors.New("request body holds no event")

// splitNDJSON splits body into one frame per non-blank line. A trailing
// '\r' is dropped; blank lines (such as the final newline) are skipped and
// do not count as events. A line over maxEvent bytes becomes an oversize
// frame; a body with more than maxEvents events is a framing error naming
// the first line past the limit.
func splitNDJSON(body []byte, maxEvent, maxEvents int, dst []frame) ([]frame, error) {
	line := 0
	for len(body) > 0 {
		line++
		var l []byte
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			l, body = body[:i], body[i+1:]
		} else {
			l, body = body, nil
		}
		l = bytes.TrimSuffix(l, []byte{'\r'})
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		idx := len(dst)
		if idx >= maxEvents {
			return dst, &framingError{index: idx, line: line, tooMany: true,
				msg: fmt.Sprintf("line %d: batch holds more than %d events", line, maxEvents)}
		}
		if len(l) > maxEvent {
			dst = append(dst, frame{index: idx, line: line, oversize: true, size: len(l)})
			continue
		}
		dst = append(dst, frame{index: idx, line: line, raw: l, size: len(l)})
	}
	if len(dst) == 0 {
		return dst, errEmptyBody
	}
	return dst, nil
}

// splitJSON splits a JSON body holding one event object, or (when arrays is
// true) a JSON array of event objects, into frames without decoding the
// events: it scans for the top-level element boundaries, tracking strings
// and nesting. Syntax errors inside an element are left to the event parser;
// an array that is not closed, or garbage between elements, is a framing
// error.
func splitJSON(body []byte, arrays bool, maxEvent, maxEvents int, dst []frame) ([]frame, error) {
	b := bytes.TrimSpace(body)
	if len(b) == 0 {
		return dst, errEmptyBody
	}
	if b[0] != '[' {
		if len(b) > maxEvent {
			return append(dst, frame{index: 0, line: 1, oversize: true, size: len(b)}), nil
		}
		return append(dst, frame{index: 0, line: 1, raw: b, size: len(b)}), nil
	}
	if !arrays {
		return dst, &framingError{line: 1, msg: "a JSON array of events is not accepted here: send one event, or NDJSON (application/x-ndjson) for a batch"}
	}
	i := 1
	for {
		i = skipSpace(b, i)
		if i >= len(b) {
			return dst, &framingError{index: len(dst), line: 1, msg: "unterminated JSON array"}
		}
		if b[i] == ']' && len(dst) == 0 {
			i++
			break
		}
		end, err := scanValue(b, i)
		if err != nil {
			return dst, &framingError{index: len(dst), line: 1, msg: fmt.Sprintf("event %d: %v", len(dst), err)}
		}
		idx := len(dst)
		if idx >= maxEvents {
			return dst, &framingError{index: idx, line: 1, tooMany: true,
				msg: fmt.Sprintf("array holds more than %d events", maxEvents)}
		}
		if end-i > maxEvent {
			dst = append(dst, frame{index: idx, line: 1, oversize: true, size: end - i})
		} else {
			dst = append(dst, frame{index: idx, line: 1, raw: b[i:end], size: end - i})
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return dst, &framingError{index: len(dst), line: 1, msg: "unterminated JSON array"}
		}
		if b[i] == ',' {
			i++
			continue
		}
		if b[i] == ']' {
			i++
			break
		}
		return dst, &framingError{index: len(dst), line: 1, msg: fmt.Sprintf("unexpected %q between array elements", b[i])}
	}
	if skipSpace(b, i) != len(b) {
		return dst, &framingError{index: len(dst), line: 1, msg: "data after the closing ] of the array"}
	}
	if len(dst) == 0 {
		return dst, errEmptyBody
	}
	return dst, nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanValue returns the end of the JSON value starting at b[i]: for objects
// and arrays the matching close bracket (strings skipped), for scalars the
// next delimiter. It checks bracket balance only.
func scanValue(b []byte, i int) (int, error) {
	switch b[i] {
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				k, err := skipString(b, j)
				if err != nil {
					return 0, err
				}
				j = k - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errors.New("unterminated JSON value")
	case '"':
		return skipString(b, i)
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\t' && b[j] != '\r' {
			j++
		}
		return j, nil
	}
}

// skipString returns the index just past the string starting at b[i] == '"'.
func skipString(b []byte, i int) (int, error) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, errors.New("unterminated JSON string")
}
