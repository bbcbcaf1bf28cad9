package gatewaytest

import (
	"bytes"
	"os"
	"testing"
)

// FixtureLines are the non-empty lines of a JSON Lines fixture file (the
// spec fixtures in aep/testdata).
func FixtureLines(tb testing.TB, path string) [][]byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if l = bytes.TrimSpace(l); len(l) > 0 {
			out = append(out, l)
		}
	}
	return out
}
