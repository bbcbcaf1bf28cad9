package gatewaytest

import (
	"bytes"
	"encoding/json"
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

// FixturePins is a pinned-projection fixture (aep/testdata/r-otlp-expected.json,
// r-ocsf-expected.json): a JSON object from golden-event index to record. Fewer
// than atLeast pins fails tb (a truncated fixture would make the checks vacuous).
func FixturePins(tb testing.TB, path string, atLeast int) map[string]json.RawMessage {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var pins map[string]json.RawMessage
	if err := json.Unmarshal(b, &pins); err != nil || len(pins) < atLeast {
		tb.Fatalf("pins %s: %v (%d, want at least %d)", path, err, len(pins), atLeast)
	}
	return pins
}
