package main

import (
	"os"
	"testing"
)

// TestMain lets the test binary stand in for aepctl where a test makes it
// start itself as a child process: bench ingest --baseline-http runs
// "<its own executable> bench http-sink", which under go test is this
// binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "bench" && os.Args[2] == "http-sink" {
		main()
	}
	os.Exit(m.Run())
}
