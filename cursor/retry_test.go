package cursor

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestRetryCoordinator(t *testing.T) {
	calls := 0
	err := RetryCoordinator(context.Background(), func() error {
		calls++
		switch calls {
		case 1:
			return fmt.Errorf("wrapped: %w", kerr.CoordinatorNotAvailable)
		case 2:
			return kerr.CoordinatorLoadInProgress
		case 3:
			return kerr.NotCoordinator
		}
		return nil
	})
	if err != nil || calls != 4 {
		t.Fatalf("err %v after %d calls, want success after 4", err, calls)
	}

	calls = 0
	boom := errors.New("boom")
	if err := RetryCoordinator(context.Background(), func() error { calls++; return boom }); err != boom || calls != 1 {
		t.Fatalf("a non-coordinator error must end at once: %v after %d calls", err, calls)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = RetryCoordinator(ctx, func() error { return kerr.CoordinatorNotAvailable })
	if !errors.Is(err, kerr.CoordinatorNotAvailable) {
		t.Fatalf("after ctx ends the last error is returned: %v", err)
	}
}
