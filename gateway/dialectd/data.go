package dialectd

import (
	"bytes"
	"strconv"

	"github.com/aep-gateway/aep-gateway/internal/jsonscan"
)

// appendData appends to dst the SSE data of one dialect D event: the stored
// event bytes with a "delivery" member {mode, sequence, cursor} as the last
// member, on one line. The stored bytes are otherwise kept as they are,
// except that a "delivery" member the emitter put in the event is replaced
// (it described the emitter's hop, not this stream) and raw line breaks,
// which valid JSON holds only as whitespace, become spaces. ok is false when
// event is not a JSON object; dst is returned unchanged then.
func appendData[C string | []byte](dst, event []byte, mode string, seq uint64, cur C) ([]byte, bool) {
	end := len(event)
	for end > 0 && jsonscan.IsSpace(event[end-1]) {
		end--
	}
	first := jsonscan.SkipSpace(event, 0)
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
	for last >= n && jsonscan.IsSpace(dst[last]) {
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
// names are compared as written (an escaped name does not match); aep
// refuses a delivery member whose name is escaped. ok is false when there
// is no such member or b is malformed before it.
func memberSpan(b []byte, name string) (start, end int, ok bool) {
	it := jsonscan.Object(b, jsonscan.SkipSpace(b, 0))
	prevEnd := -1 // end of the previous member's value
	for {
		m, ok := it.Next()
		if !ok {
			return 0, 0, false
		}
		if string(m.RawName(b)) == name {
			start, end = jsonscan.CutMember(prevEnd, m.Name, m.End, m.Next)
			return start, end, true
		}
		prevEnd = m.End
	}
}
