package bindingtest

import (
	"testing"
)

// Events published after the stream opened arrive, each once, in order per
// session, with the bytes the dialect promises: R byte-identical, D the
// event plus its delivery object.
func TestLiveDelivery(t *testing.T) {
	forEach(t, func(t *testing.T, b binding) {
		s := newStack(t, b.mode, stackConfig{})
		st := b.open(t, s, openOpts{ahead: 64})
		const n, step = 12, 4
		sent := map[string]map[int]string{}
		for _, session := range []string{"sess_a", "sess_b"} {
			sent[session] = map[int]string{}
		}
		for lo := 0; lo < n; lo += step { // the sessions' events interleave
			for session, m := range sent {
				for seq, ev := range publish(t, s, b.dialect, session, lo, lo+step, 0) {
					m[seq] = ev
				}
			}
		}
		got := map[string][]msg{}
		for _, m := range events(t, st, 2*n) {
			got[m.session] = append(got[m.session], m)
		}
		for session, evs := range got {
			expectSeqs(t, evs, session, 0, n)
			for _, m := range evs {
				expectBytes(t, b.dialect, sent[session][m.seq], m)
			}
		}
		if len(got) != 2 {
			t.Fatalf("sessions %v, want sess_a and sess_b", got)
		}
	})
}
