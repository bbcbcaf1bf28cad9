package dialectd

import (
	"bytes"
	"strconv"
)

// appendData appends to dst the SSE data of one dialect D event: the stored
// event bytes with a "delivery" member {mode, sequence, cursor} as the last
// member, on one line. The stored bytes are otherwise kept as they are,
// except that a "delivery" member the emitter put in the event is replaced
// (it described the emitter's hop, not this stream) and raw line breaks,
// which valid JSON holds only as whitespace, become spaces. ok is false when
// event is not a JSON object; dst is returned unchanged then.
func appendData(dst, event []byte, mode string, seq uint64, cur string) ([]byte, bool) {
	end := len(event)
	for end > 0 && isSpace(event[end-1]) {
		end--
	}
	first := skipSpace(event, 0)
	if end == 0 || event[end-1] != '}' || first >= end || event[first] != '{' {
		return dst, false
	}
	body := event[:end-1] // without the closing brace
	cutFrom, cutTo := -1, -1
	if !bytes.Contains(event, []byte(`"delivery"`)) {
		// fast path: no member to replace
	} else if s, e, ok := memberSpan(event, "delivery"); ok {
		cutFrom, cutTo = s, e
	}
	n := len(dst)
	dst = appendOneLine(dst, body, cutFrom, cutTo)
	last := len(dst) - 1
	for last >= n && isSpace(dst[last]) {
		last--
	}
	if last >= n && dst[last] != '{' {
		dst = append(dst, ',')
	}
	// mode is one of our constants and cur is base64url: neither needs
	// escaping.
	dst = append(dst, `"delivery":{"mode":"`...)
	dst = append(dst, mode...)
	dst = append(dst, `","sequence":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `,"cursor":"`...)
	dst = append(dst, cur...)
	return append(dst, `"}}`...), true
}

// appendOneLine appends b without the bytes [cutFrom, cutTo) (none when
// cutFrom < 0), turning CR and LF into spaces.
func appendOneLine(dst, b []byte, cutFrom, cutTo int) []byte {
	if cutFrom >= 0 && cutFrom <= cutTo && cutTo <= len(b) {
		dst = appendNoBreaks(dst, b[:cutFrom])
		b = b[cutTo:]
	}
	return appendNoBreaks(dst, b)
}

func appendNoBreaks(dst, b []byte) []byte {
	if bytes.IndexByte(b, '\n') < 0 && bytes.IndexByte(b, '\r') < 0 {
		return append(dst, b...)
	}
	n := len(dst)
	dst = append(dst, b...)
	for i, c := range dst[n:] {
		if c == '\n' || c == '\r' {
			dst[n+i] = ' '
		}
	}
	return dst
}

// memberSpan finds the top-level member name of the JSON object b and
// returns the bytes to cut to remove it with one adjacent comma. Member
// names are compared as written (an escaped name does not match).
func memberSpan(b []byte, name string) (start, end int, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return 0, 0, false
	}
	i++
	prevEnd := -1 // end of the previous member's value
	for {
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != '"' {
			return 0, 0, false
		}
		keyStart := i
		j := skipString(b, i)
		if j < 0 {
			return 0, 0, false
		}
		key := b[i+1 : j-1]
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return 0, 0, false
		}
		vEnd := skipValue(b, skipSpace(b, i+1))
		if vEnd < 0 {
			return 0, 0, false
		}
		i = skipSpace(b, vEnd)
		if i >= len(b) {
			return 0, 0, false
		}
		if string(key) == name {
			if b[i] == ',' {
				return keyStart, skipSpace(b, i+1), true
			}
			if prevEnd >= 0 { // last member: take the comma before it
				return prevEnd, vEnd, true
			}
			return keyStart, vEnd, true
		}
		switch b[i] {
		case ',':
			prevEnd = vEnd
			i++
		default:
			return 0, 0, false
		}
	}
}

// skipString returns the index after the JSON string starting at b[i], or -1.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// skipValue returns the index after the JSON value starting at b[i], or -1.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				j := skipString(b, i)
				if j < 0 {
					return -1
				}
				i = j - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) && !isSpace(b[j]) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
