package aep

import (
	"fmt"
	"testing"
)

func TestLines(t *testing.T) {
	tests := []struct {
		body string
		want string
	}{
		{"", ""},
		{"\n", `0:""`},
		{"{}", `0:"{}"`},
		{"{}\n", `0:"{}"`},
		{"{}\r\n{}\r\n", `0:"{}" 1:"{}"`},
		{"{}\n\n{}", `0:"{}" 1:"" 2:"{}"`},
		{"{}\n{}\n\n", `0:"{}" 1:"{}" 2:""`},
		{"a\rb\n", `0:"a\rb"`},
	}
	for _, tt := range tests {
		got := ""
		for i, line := range Lines([]byte(tt.body)) {
			if got != "" {
				got += " "
			}
			got += fmt.Sprintf("%d:%q", i, line)
		}
		if got != tt.want {
			t.Errorf("Lines(%q) = %s, want %s", tt.body, got, tt.want)
		}
	}
	n := 0
	for range Lines([]byte("a\nb\nc\n")) {
		n++
		if n == 2 {
			break
		}
	}
	if n != 2 {
		t.Error("break did not stop the iteration")
	}
}

// A batch of the R golden corpus goes through Lines and ParseAs line by line.
func TestLinesGoldenBatch(t *testing.T) {
	var body []byte
	for _, l := range readLines(t, "testdata/r-golden.jsonl") {
		body = append(append(body, l...), '\r', '\n')
	}
	n := 0
	for i, line := range Lines(body) {
		if _, err := ParseAs(DialectR, line, Limits{}); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		n++
	}
	if n != 64 {
		t.Fatalf("%d lines", n)
	}
}
