package main

import (
	"os"
	"testing"
)

// TestMain lets the test binary stand in for aepbench where a test makes it
// start itself as a child process: ingest --baseline-http runs
// "<its own executable> http-sink", which under go test is this binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "http-sink" {
		main()
	}
	os.Exit(m.Run())
}
