package aep

import (
	"strings"
	"unicode/utf8"
)

// Validators for the string formats both envelopes use. They work on the
// decoded bytes of a string value and never allocate.

// validDateTime reports whether b is an RFC 3339 date-time (§5.6):
// YYYY-MM-DD "T" hh:mm:ss [.frac] ("Z" | ±hh:mm), "T" and "Z" in either case,
// with calendar-correct days and a leap second only at 23:59:60 UTC. This is
// JSON Schema's "date-time" format, which both envelope schemas use.
func validDateTime(b []byte) bool {
	if len(b) < 20 {
		return false
	}
	year, ok1 := digits(b[0:4])
	month, ok2 := digits(b[5:7])
	day, ok3 := digits(b[8:10])
	hour, ok4 := digits(b[11:13])
	minute, ok5 := digits(b[14:16])
	sec, ok6 := digits(b[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) ||
		b[4] != '-' || b[7] != '-' || (b[10] != 'T' && b[10] != 't') || b[13] != ':' || b[16] != ':' {
		return false
	}
	if month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 60 {
		return false
	}
	i := 19
	if b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	if i >= len(b) {
		return false
	}
	offMin := 0
	switch b[i] {
	case 'Z', 'z':
		i++
	case '+', '-':
		if len(b)-i != 6 || b[i+3] != ':' {
			return false
		}
		oh, ok1 := digits(b[i+1 : i+3])
		om, ok2 := digits(b[i+4 : i+6])
		if !ok1 || !ok2 || oh > 23 || om > 59 {
			return false
		}
		offMin = oh*60 + om
		if b[i] == '-' {
			offMin = -offMin
		}
		i += 6
	default:
		return false
	}
	if i != len(b) {
		return false
	}
	if sec == 60 {
		utc := ((hour*60+minute-offMin)%1440 + 1440) % 1440
		if utc != 23*60+59 {
			return false
		}
	}
	return true
}

func digits(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// uriChar classifies the ASCII bytes allowed in an RFC 3986 URI outside
// percent-encodings: unreserved, gen-delims and sub-delims.
var uriChar = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-._~:/?#[]@!$&'()*+,;=" {
		t[c] = true
	}
	return t
}()

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// validURI reports whether b is an absolute RFC 3986 URI (JSON Schema's
// "uri" format): a scheme, ':', then only URI characters and well-formed
// percent-encodings, at most one '#', brackets only around an IP literal
// host, and a numeric port. It checks the grammar's character classes and
// structure, not every production (an IPv6 literal's inside is not parsed).
func validURI(b []byte) bool {
	// scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) ":"
	if len(b) == 0 || !isAlpha(b[0]) {
		return false
	}
	i := 1
	for i < len(b) && (isAlpha(b[i]) || (b[i] >= '0' && b[i] <= '9') || b[i] == '+' || b[i] == '-' || b[i] == '.') {
		i++
	}
	if i >= len(b) || b[i] != ':' {
		return false
	}
	i++
	rest := b[i:]
	hashes := 0
	for j := 0; j < len(rest); j++ {
		c := rest[j]
		switch {
		case c == '%':
			if j+2 >= len(rest) || !isHex(rest[j+1]) || !isHex(rest[j+2]) {
				return false
			}
			j += 2
		case c == '#':
			hashes++
		case !uriChar[c]:
			return false
		}
	}
	if hashes > 1 {
		return false
	}
	// Brackets belong only to an IP-literal host inside "//authority".
	if len(rest) >= 2 && rest[0] == '/' && rest[1] == '/' {
		auth := rest[2:]
		for j, c := range auth {
			if c == '/' || c == '?' || c == '#' {
				auth = auth[:j]
				break
			}
		}
		if !validAuthority(auth) {
			return false
		}
		rest = rest[2+len(auth):]
	}
	for _, c := range rest {
		if c == '[' || c == ']' {
			return false
		}
	}
	return true
}

// validAuthority checks [userinfo "@"] host [":" port]: brackets only as
// the delimiters of an IP-literal host, a port of digits only.
func validAuthority(a []byte) bool {
	for j, c := range a {
		if c == '@' {
			for _, u := range a[:j] {
				if u == '[' || u == ']' {
					return false
				}
			}
			a = a[j+1:]
			break
		}
	}
	var port []byte
	if len(a) > 0 && a[0] == '[' {
		end := -1
		for j, c := range a {
			if c == ']' {
				end = j
				break
			}
		}
		if end < 2 {
			return false
		}
		for _, c := range a[1:end] {
			if c == '[' || c == '@' {
				return false
			}
		}
		port = a[end+1:]
		if len(port) > 0 && port[0] != ':' {
			return false
		}
	} else {
		host := a
		for j, c := range a {
			if c == ':' {
				host, port = a[:j], a[j:]
				break
			}
		}
		for _, c := range host {
			if c == '[' || c == ']' || c == '@' {
				return false
			}
		}
	}
	if len(port) > 0 {
		for _, c := range port[1:] {
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	return true
}

func isAlpha(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }

// validTraceparent reports whether b is a W3C Trace Context traceparent as
// the R envelope schema pins it (^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$),
// with the values W3C Trace Context §3.2.2 declares invalid also refused:
// version ff, an all-zero trace-id, an all-zero parent-id.
func validTraceparent(b []byte) bool {
	if len(b) != 55 || b[2] != '-' || b[35] != '-' || b[52] != '-' {
		return false
	}
	for i, c := range b {
		if i == 2 || i == 35 || i == 52 {
			continue
		}
		if !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) {
			return false
		}
	}
	if b[0] == 'f' && b[1] == 'f' {
		return false
	}
	return !allZero(b[3:35]) && !allZero(b[36:52])
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != '0' {
			return false
		}
	}
	return true
}

// AppendJSONString appends s as a JSON string in this package's canonical
// form: only '"', '\\' and control characters are escaped (\b \f \n \r \t,
// else \u00xx), everything else is written as UTF-8; invalid UTF-8 becomes
// U+FFFD. Extension attribute string values in [Ext] are in this form, so
// equal strings have equal bytes whatever escapes the emitter used.
func AppendJSONString(dst []byte, s string) []byte {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\ufffd")
	}
	return appendJSONStr(dst, s)
}

// appendJSONStr is AppendJSONString for valid UTF-8 input.
func appendJSONStr[T string | []byte](dst []byte, s T) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
