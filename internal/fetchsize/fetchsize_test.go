package fetchsize

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The bound follows the compression ratio of what was read: 100x
// compressible data lowers it to a hundredth of the target (not under
// Min), incompressible data raises it back to the target, and nothing read
// leaves it as it is. A new Sizer starts at Min.
func TestSizerFollowsTheRatio(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s := New(256 << 10)
	if s.Bound() != Min {
		t.Fatalf("first bound %d, want %d", s.Bound(), Min)
	}
	read := func(stored, decoded int) {
		s.OnFetchBatchRead(kgo.BrokerMetadata{}, "t", 0, kgo.FetchBatchMetrics{CompressedBytes: stored, UncompressedBytes: decoded})
	}
	read(10<<10, 1000<<10)
	s.Adjust(cl)
	if got, want := s.Bound(), int32(256<<10/100); got < want-64 || got > want+64 {
		t.Fatalf("bound %d after 100x data, want about %d", got, want)
	}
	s.Adjust(cl)
	if got := s.Bound(); got < 2000 || got > 3000 {
		t.Fatalf("bound %d after nothing read, want it kept", got)
	}
	read(100<<10, 100<<10)
	s.Adjust(cl)
	if s.Bound() != 256<<10 {
		t.Fatalf("bound %d after incompressible data, want the target", s.Bound())
	}
	read(1, 1<<30)
	s.Adjust(cl)
	if s.Bound() != Min {
		t.Fatalf("bound %d after absurdly compressible data, want Min", s.Bound())
	}
}
