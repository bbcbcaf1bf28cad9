package gather

import (
	"context"
	"testing"
	"time"
)

func TestAtTail(t *testing.T) {
	for _, c := range []struct {
		decoded int
		bound   int32
		want    bool
	}{
		{0, 0, true}, {300, 1 << 20, true}, {Bytes, 0, false}, {Bytes - 1, 0, true},
		{600, 1024, false}, {400, 1024, true}, {Bytes - 1, 1 << 20, true}, {Bytes + 1, 1 << 30, false},
	} {
		if got := AtTail(c.decoded, c.bound); got != c.want {
			t.Errorf("AtTail(%d, %d) = %v, want %v", c.decoded, c.bound, got, c.want)
		}
	}
}

// Wait returns when its context ends, whatever is left of d.
func TestWaitEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Wait(ctx, time.Hour); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Wait outlived its context")
	}
	Wait(context.Background(), 0) // no wait at all
}
