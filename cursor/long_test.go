package cursor

import "os"

// longTests reports whether the long property and differential tests run at
// full size: AEP_TEST_LONG=1, which CI sets (.ci/run). Without it they run a
// smaller size that still crosses every boundary they check, so that
// `make test` stays quick on a shared machine.
func longTests() bool { return os.Getenv("AEP_TEST_LONG") == "1" }
