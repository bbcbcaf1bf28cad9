package jsonscan

import (
	"unicode/utf16"
	"unicode/utf8"
)

// IsSpace reports whether c is JSON whitespace: space, tab, LF or CR
// (RFC 8259 §2).
func IsSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// SkipSpace returns the offset of the first byte at or after i that is not
// whitespace, or len(b) when there is none. An i outside [0, len(b)] is
// returned as it is.
func SkipSpace(b []byte, i int) int {
	for uint(i) < uint(len(b)) && IsSpace(b[i]) {
		i++
	}
	return i
}

// TrimSpace returns b without leading and trailing whitespace.
func TrimSpace(b []byte) []byte {
	for len(b) > 0 && IsSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && IsSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// inString[c] is true for a byte that cannot end or escape inside a
// string: anything but '"' and '\\'.
var inString = func() (t [256]bool) {
	for c := range t {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// plain[c] is true for a byte that changes nothing in the nesting count of
// ValueEnd: anything but a quote and the four brackets.
var plain = func() (t [256]bool) {
	for c := range t {
		t[c] = c != '"' && c != '{' && c != '[' && c != '}' && c != ']'
	}
	return t
}()

// StringEnd returns the offset just past the string that starts with the
// quote at b[i]: past the first '"' after i that no backslash escapes. A
// backslash takes the byte after it into the string whatever that byte is;
// escapes, UTF-8 and control characters are not checked.
//
// It returns -1 when i is out of range, b[i] is not '"', or the string has
// no closing quote.
func StringEnd(b []byte, i int) int {
	if uint(i) >= uint(len(b)) || b[i] != '"' {
		return -1
	}
	for i++; ; i++ {
		for i < len(b) && inString[b[i]] {
			i++
		}
		if i >= len(b) {
			return -1
		}
		if b[i] == '"' {
			return i + 1
		}
		i++ // the escaped byte; the loop steps over it
	}
}

// ValueEnd returns the offset just past the JSON value that starts at b[i]
// (no whitespace before it):
//
//   - a string: [StringEnd];
//   - an object or an array: past the bracket that brings the count of open
//     brackets back to zero, strings skipped. Opening and closing kinds are
//     not matched, so on malformed input "[}" is a value;
//   - anything else (a number, true, false, null): the first whitespace,
//     ',', '}' or ']' after i, or len(b). The bytes in between are not
//     checked.
//
// On valid JSON the result is exact. It returns -1 when i is out of range,
// when a string or bracket is not closed before the end of b, and when b[i]
// itself ends a value (whitespace, ',', '}' or ']'), where no value starts.
// Nesting is counted, not recursed into, so depth costs nothing.
func ValueEnd(b []byte, i int) int {
	if uint(i) >= uint(len(b)) {
		return -1
	}
	switch b[i] {
	case '"':
		return StringEnd(b, i)
	case '{', '[':
		depth := 0
		for {
			for i < len(b) && plain[b[i]] {
				i++
			}
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"':
				if i = StringEnd(b, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			default: // '}', ']'
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
	}
	j := i
	for j < len(b) && !IsSpace(b[j]) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// Hex4 decodes the four hexadecimal digits b[i:i+4] (either case), as in
// the XXXX of a \uXXXX escape. ok is false when fewer than four bytes are
// left at i, i is negative, or one of them is not a hex digit.
func Hex4(b []byte, i int) (r rune, ok bool) {
	if i < 0 || len(b)-i < 4 {
		return 0, false
	}
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// Escape decodes the escape sequence that starts at b[i] == '\\': one of
// \" \\ \/ \b \f \n \r \t (2 bytes), a \uXXXX (6 bytes), or a UTF-16
// surrogate pair written as two \u escapes, high then low (12 bytes). It
// returns the rune and the sequence's length.
//
// A \u escape of a surrogate that does not start such a pair decodes as
// encoding/json decodes it: to utf8.RuneError, length 6, and whatever
// follows is decoded on its own. A validator that must refuse unpaired
// surrogates tells them from a written \uFFFD by n == 6, r ==
// utf8.RuneError and [Hex4] of b[i+2:] not being 0xFFFD.
//
// n is 0 when there is no escape at i: i out of range, b[i] not '\\', an
// unknown escape letter, or a \u without four hex digits.
func Escape(b []byte, i int) (r rune, n int) {
	if i < 0 || len(b)-i < 2 || b[i] != '\\' {
		return 0, 0
	}
	switch c := b[i+1]; c {
	case '"', '\\', '/':
		return rune(c), 2
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		r, ok := Hex4(b, i+2)
		if !ok {
			return 0, 0
		}
		if !utf16.IsSurrogate(r) {
			return r, 6
		}
		if r < 0xDC00 && len(b)-i >= 12 && b[i+6] == '\\' && b[i+7] == 'u' {
			if r2, ok := Hex4(b, i+8); ok && r2 >= 0xDC00 && r2 <= 0xDFFF {
				return utf16.DecodeRune(r, r2), 12
			}
		}
		return utf8.RuneError, 6
	}
	return 0, 0
}

// AppendUnescaped appends to dst the decoded form of body, the bytes of a
// string between its quotes: escapes are decoded by [Escape], every other
// byte is copied as it is (UTF-8 is not checked). A backslash that starts
// no escape is copied as it is.
func AppendUnescaped(dst, body []byte) []byte {
	for i := 0; i < len(body); {
		if body[i] != '\\' {
			j := i + 1
			for j < len(body) && body[j] != '\\' {
				j++
			}
			dst = append(dst, body[i:j]...)
			i = j
			continue
		}
		r, n := Escape(body, i)
		if n == 0 {
			dst = append(dst, '\\')
			i++
			continue
		}
		dst = utf8.AppendRune(dst, r)
		i += n
	}
	return dst
}

// StringEquals reports whether lit, a JSON string with its quotes, decodes
// to want, decoding as encoding/json does: escapes by [Escape], and a byte
// that is not valid UTF-8 as U+FFFD. It is false when lit is not quoted or
// holds a backslash that starts no escape. Control characters, which JSON
// forbids raw in a string, are not checked. It never allocates.
func StringEquals(lit []byte, want string) bool {
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return false
	}
	in := lit[1 : len(lit)-1]
	j := 0
	var buf [utf8.UTFMax]byte
	for i := 0; i < len(in); {
		c := in[i]
		if c < utf8.RuneSelf && c != '\\' {
			if j >= len(want) || want[j] != c {
				return false
			}
			i++
			j++
			continue
		}
		var r rune
		if c == '\\' {
			var n int
			if r, n = Escape(in, i); n == 0 {
				return false
			}
			i += n
		} else {
			var size int
			r, size = utf8.DecodeRune(in[i:])
			if r != utf8.RuneError || size != 1 {
				// A valid sequence: compare its bytes as they are.
				if len(want)-j < size || string(in[i:i+size]) != want[j:j+size] {
					return false
				}
				i += size
				j += size
				continue
			}
			i++ // an invalid byte decodes to U+FFFD
		}
		n := utf8.EncodeRune(buf[:], r)
		if len(want)-j < n || string(buf[:n]) != want[j:j+n] {
			return false
		}
		j += n
	}
	return j == len(want)
}
