package partitioning

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// A refused creation names its cause and the flag that fixes it, and
// stays recognizable (errors.Is, IsProvisioningError); other errors pass
// through untouched.
func TestExplainCreate(t *testing.T) {
	err := ExplainCreate(fmt.Errorf("create: %w", kerr.InvalidReplicationFactor), 3, "Replication factor: 3 larger than available brokers: 1.")
	msg := err.Error()
	if !strings.Contains(msg, "replication factor 3 larger than the available brokers") || !strings.Contains(msg, "set --topic-replication-factor") ||
		!strings.Contains(msg, "available brokers: 1") || !errors.Is(err, kerr.InvalidReplicationFactor) || !IsProvisioningError(err) {
		t.Fatalf("explained: %v", err)
	}
	if got := ExplainCreate(kerr.InvalidReplicationFactor, -1).Error(); !strings.Contains(got, "(broker default)") {
		t.Fatalf("broker default: %s", got)
	}
	plain := errors.New("dial tcp: refused")
	if ExplainCreate(plain, 3) != plain || IsProvisioningError(plain) {
		t.Fatal("an unrelated error was reworded")
	}
}
