package aep

import "testing"

func TestIsCommandR(t *testing.T) {
	for typ, want := range map[string]bool{
		"control.cancel": true, "control.attention.respond": true, "control.pause": true, "control.resume": true,
		"x.acme.control.reboot": true, "control.accepted": false, "control.rejected": false,
		"attention.routed": false, "session.started": false, "x.acme.session.x": false, "x.acme.control.": false,
	} {
		if got := IsCommandR(typ); got != want {
			t.Errorf("IsCommandR(%q) = %v, want %v", typ, got, want)
		}
	}
}
