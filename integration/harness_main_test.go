package integration

import (
	"os"
	"testing"
)

// TestMain runs the package's tests, then removes the shared broker container if one was started. It is the
// package's only TestMain.
func TestMain(m *testing.M) {
	code := m.Run()
	Shutdown()
	os.Exit(code)
}
