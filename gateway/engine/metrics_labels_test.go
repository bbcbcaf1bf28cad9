package engine

import "testing"

// The tenant label is capped: past the cap every new tenant counts as
// OtherTenant, and a tenant keeps the label it got first.
func TestTenantLabelsAreCapped(t *testing.T) {
	l := newTenantLabels(2)
	for _, c := range []struct{ in, want string }{{"a", "a"}, {"b", "b"}, {"c", OtherTenant}, {"a", "a"}, {"d", OtherTenant}, {"b", "b"}} {
		if got := l.label(c.in); got != c.want {
			t.Fatalf("label(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
