package integration

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// rosterAttack opens 4 emitter connections whose hello carries identity
// (agent and instance) and declarations of decl bytes each, claims 64
// sessions on each, and asks for the roster. It reports whether the hello
// was refused (and its error code), else the roster reply's size and
// entries.
func rosterAttack(t *testing.T, g *gatewayProc, identity string, decl int) (refused string, size, entries int) {
	t.Helper()
	url := "ws" + strings.TrimPrefix(g.URL, "http") + "/socket"
	o := gatewaytest.WSOptions{Header: http.Header{"Authorization": {"Bearer k-acme"}}, Buffer: 256, ReadLimit: 512 << 20}
	d := `["` + strings.Repeat("d", decl) + `"]`
	hello := `{"type":"hello","versions":["0.1"],"role":"emitter","identity":{"agent":"` + identity + `","instance":"` + identity + `"},"capabilities":{"emits":` + d + `,"control":{"accepts":` + d + `}}}`
	for c := range 4 {
		em := gatewaytest.DialWSR(t, url, "", o)
		em.Send(hello)
		if f := em.Next(); f.Str("type") != "hello" {
			return f.Str("code"), 0, 0
		}
		for i := range 64 {
			em.Send(rEvent(fmt.Sprintf("s%d-%02d", c, i), 0))
		}
	}
	cons := gatewaytest.DialWSR(t, url, gatewaytest.RConsumerHello, o)
	for i := 0; ; i++ {
		cons.Send(fmt.Sprintf(`{"type":"roster","id":"r%d"}`, i))
		raw := cons.NextFrame()
		if strings.HasPrefix(string(raw), `{"type":"error"`) {
			return "roster: " + string(raw[:min(len(raw), 200)]), len(raw), 0
		}
		n := strings.Count(string(raw), `"session":`)
		if n >= 256 || i > 100 {
			return "", len(raw), n
		}
		time.Sleep(50 * time.Millisecond) // poll: the claims arrive as the events are written
	}
}

// Issue 31: 4 emitter connections with 100 KB identities claiming 64
// sessions each made one roster reply of 102 MB. Now such a hello is
// refused with limit-exceeded, and the largest roster the bounds allow
// (the same 256 claims at the identity and declaration bounds) stays
// under the 4 MiB roster bound.
func TestHostileRosterIdentitiesBounded(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte(keyFileLine("acme", "k-acme")), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "--data-dir", dir, "--embedded-kafka-listen", "127.0.0.1:0", "--api-keys", keys)
	rss0 := procStatus(g.cmd.Process.Pid, "VmRSS")
	refused, size, n := rosterAttack(t, g, strings.Repeat("x", 100<<10), 4000)
	t.Logf("100 KB identities: refused %q; roster %d bytes, %d entries; RSS %d -> %d kB", refused, size, n, rss0, procStatus(g.cmd.Process.Pid, "VmRSS"))
	if refused != "limit-exceeded" {
		t.Fatalf("a hello with 100 KB identities was not refused with limit-exceeded (roster %d bytes)", size)
	}
	refused, size, n = rosterAttack(t, g, strings.Repeat("x", 256), 4000)
	t.Logf("identities at the 256-byte bound, 4 KB declarations: refused %q; roster %d bytes, %d entries; RSS %d kB", refused, size, n, procStatus(g.cmd.Process.Pid, "VmRSS"))
	if refused != "" || n != 256 || size > 4<<20 {
		t.Fatalf("roster at the bounds: %q, %d entries, %d bytes (bound 4 MiB)", refused, n, size)
	}
}
