package main

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
)

func readAllLines(in []byte, max int) (lines []string, long int) {
	r := bufio.NewReaderSize(bytes.NewReader(in), 16) // small buffer: exercise ErrBufferFull
	for {
		l, tooLong, err := readLine(r, max)
		if tooLong {
			long++
		} else if len(l) > 0 {
			lines = append(lines, string(l))
		}
		if err != nil {
			return lines, long
		}
	}
}

func TestReadLine(t *testing.T) {
	tests := []struct {
		in    string
		max   int
		lines []string
		long  int
	}{
		{"a\nb\n", 100, []string{"a", "b"}, 0},
		{"a\r\nb", 100, []string{"a", "b"}, 0},
		{"\n\n  \t\r\n{}\n\n", 100, []string{"{}"}, 0},
		{strings.Repeat("x", 40) + "\nshort\n", 20, []string{"short"}, 1},
		{strings.Repeat("x", 20) + "\n", 20, nil, 1}, // the limit counts the "\n"
		{strings.Repeat("x", 19) + "\n", 20, []string{strings.Repeat("x", 19)}, 0},
	}
	for _, tc := range tests {
		lines, long := readAllLines([]byte(tc.in), tc.max)
		if long != tc.long || strings.Join(lines, "|") != strings.Join(tc.lines, "|") {
			t.Errorf("%q: lines %q long %d, want %q %d", tc.in, lines, long, tc.lines, tc.long)
		}
	}
}

// FuzzReadLine: the lines read are the input's non-blank lines, trimmed,
// when none is too long.
func FuzzReadLine(f *testing.F) {
	f.Add([]byte("a\nb\r\n\n c \n"))
	f.Add([]byte("{\"aep\":\"0.1\"}\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		lines, long := readAllLines(in, 1<<20)
		if long != 0 {
			t.Fatalf("a line of %d bytes at most was too long", len(in))
		}
		var want []string
		for _, l := range bytes.Split(in, []byte("\n")) {
			if l = bytes.TrimSpace(l); len(l) > 0 {
				want = append(want, string(l))
			}
		}
		if strings.Join(lines, "\n") != strings.Join(want, "\n") || len(lines) != len(want) {
			t.Fatalf("lines %q, want %q", lines, want)
		}
	})
}
