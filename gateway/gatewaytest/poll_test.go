package gatewaytest

import (
	"testing"
	"time"
)

func TestEventually(t *testing.T) {
	n := 0
	if !Eventually(time.Second, time.Millisecond, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("Eventually stopped after %d checks, want 3", n)
	}
	start := time.Now()
	if Eventually(20*time.Millisecond, time.Millisecond, func() bool { return false }) {
		t.Fatal("Eventually held for a condition that never holds")
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("gave up after %v, before its deadline", d)
	}
}
