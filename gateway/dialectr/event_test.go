package dialectr

import "testing"

func TestBreaksLine(t *testing.T) {
	for _, c := range []struct {
		s        string
		nul, out bool
	}{
		{"sess-1", true, false}, {"", true, false}, {"a\nb", false, true}, {"a\rb", false, true},
		{"a\x00b", false, false}, {"a\x00b", true, true}, {"\n", true, true}, {"é\r", false, true},
	} {
		if got := breaksLine(c.s, c.nul); got != c.out {
			t.Errorf("breaksLine(%q, %v) = %v, want %v", c.s, c.nul, got, c.out)
		}
	}
}
