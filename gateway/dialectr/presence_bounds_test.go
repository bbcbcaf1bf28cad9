package dialectr_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aep-gateway/aep-gateway/gateway/dialectr"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// A hello whose identity strings are over their bounds is refused with
// limit-exceeded and closed (issue 31: 100 KB identities claiming 64
// sessions each made a 102 MB roster).
func TestWSHelloIdentityBounded(t *testing.T) {
	e := newEnv(t, nil)
	big := strings.Repeat("x", 100<<10)
	for _, c := range []struct{ name, hello string }{
		{"agent", `{"type":"hello","versions":["0.1"],"role":"emitter","identity":{"agent":"` + big + `"}}`},
		{"instance", `{"type":"hello","versions":["0.1"],"role":"emitter","identity":{"agent":"a","instance":"` + big + `"}}`},
		{"consumer agent", `{"type":"hello","versions":["0.1"],"role":"consumer","identity":{"agent":"` + big + `"}}`},
		{"agent one over", `{"type":"hello","versions":["0.1"],"role":"both","identity":{"agent":"` + strings.Repeat("a", dialectr.MaxIdentityBytes+1) + `"}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := e.dialWS("")
			w.Send(c.hello)
			f := w.Next()
			if f.Str("type") != "error" || f.Str("code") != "limit-exceeded" || !strings.Contains(f.Str("detail"), "hello.identity") {
				t.Fatalf("got %v, want error limit-exceeded", f)
			}
			if f := w.Next(); f.Str("type") != "closing" {
				t.Fatalf("got %v, want closing", f)
			}
			if st := w.Closed(); st != websocket.StatusPolicyViolation {
				t.Fatalf("close status %v", st)
			}
		})
	}
	// At the bound: accepted.
	w := e.dialWS("")
	w.Send(`{"type":"hello","versions":["0.1"],"role":"emitter","identity":{"agent":"` + strings.Repeat("a", dialectr.MaxIdentityBytes) + `","instance":"` + strings.Repeat("i", dialectr.MaxIdentityBytes) + `"}}`)
	if f := w.Next(); f.Str("type") != "hello" {
		t.Fatalf("identity at the bound: %v", f)
	}
}

// A session id over MaxSessionClaimBytes is written but never claimed, so
// the roster does not repeat it; one at the bound is claimed.
func TestLongSessionNotClaimed(t *testing.T) {
	e := newEnv(t, func(c *dialectr.Config) { c.Authenticated = true })
	em := e.dialWS(targetHello)
	long := strings.Repeat("s", dialectr.MaxSessionClaimBytes+1)
	ok := strings.Repeat("k", dialectr.MaxSessionClaimBytes)
	em.Send(rEvent("e-long", long, 0, 0))
	em.Send(rEvent("e-ok", ok, 0, 0))
	cons := e.dialWS(gatewaytest.RConsumerHello)
	eventually(t, cons, []string{ok})
}

// A roster reply is bounded in bytes: past maxRosterBytes the request is
// refused with limit-exceeded instead of repeating every declaration.
func TestRosterReplyBounded(t *testing.T) {
	prev := dialectr.SetMaxRosterBytes(64 << 10)
	defer dialectr.SetMaxRosterBytes(prev)
	e := newEnv(t, func(c *dialectr.Config) { c.Authenticated = true })
	decl := `["` + strings.Repeat("d", 4000) + `"]`
	hello := `{"type":"hello","versions":["0.1"],"role":"emitter","identity":{"agent":"a","instance":"i"},"capabilities":{"emits":` + decl + `,"control":{"accepts":` + decl + `}}}`
	em := e.dialWS(hello)
	var want []string
	for i := range 4 {
		s := fmt.Sprintf("sess-%d", i)
		want = append(want, s)
		em.Send(rEvent("e-"+s, s, 0, 0))
	}
	cons := e.dialWS(gatewaytest.RConsumerHello)
	eventually(t, cons, want) // 4 entries of ~8 KB: under 64 KiB
	for i := 4; i < 12; i++ {
		s := fmt.Sprintf("sess-%d", i)
		em.Send(rEvent("e-"+s, s, 0, 0))
	}
	ok := gatewaytest.Eventually(gatewaytest.Wait, 50*time.Millisecond, func() bool {
		cons.Send(`{"type":"roster","id":"big"}`)
		f := cons.Next()
		if f.Str("type") == "roster" {
			return false
		}
		if f.Str("type") != "error" || f.Str("code") != "limit-exceeded" || f.Str("id") != "big" {
			t.Fatalf("got %v, want the roster or limit-exceeded", f)
		}
		return true
	})
	if !ok {
		t.Fatal("a roster of 12 entries of ~8 KB was answered under a 64 KiB bound")
	}
}
