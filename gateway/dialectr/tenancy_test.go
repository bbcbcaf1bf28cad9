package dialectr_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// Nothing crosses tenants: streams, sockets and resumes of one tenant see
// only its own events, even for a session name both use; no token, no
// stream.
func TestTenantsAreIsolated(t *testing.T) {
	digest := func(k string) string { d := sha256.Sum256([]byte(k)); return hex.EncodeToString(d[:]) }
	ks, err := gateway.ParseKeyStore(strings.NewReader(fmt.Sprintf("acme sha256:%s\nglobex sha256:%s\n", digest("key-acme"), digest("key-globex"))))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvGW(t, nil, func(c *gateway.Config) { c.Keys = ks })

	resp, cancel := e.rawSSE(nil, nil)
	cancel()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("SSE without a token: %d", resp.StatusCode)
	}
	if c, _, err := gatewaytest.TryDialWS(gatewaytest.WSURL(e.url, "/socket"), gatewaytest.WSOptions{}); err == nil {
		_ = c.CloseNow()
		t.Fatal("WS without a token was accepted")
	}

	acme0, acme1 := rEvent("a-0", "s-shared", 0, 0), rEvent("a-1", "s-shared", 0, 1)
	globex0, globex1 := rEvent("g-0", "s-shared", 0, 0), rEvent("g-1", "s-shared", 0, 1)
	e.postAs("key-acme", acme0, acme1)
	e.postAs("key-globex", globex0, globex1)

	a := e.getSSE(nil, map[string]string{"Authorization": "Bearer key-acme", "Last-Event-ID": "s-shared:0:0"})
	if m := a.nextEvent(); m.Data != acme1 {
		t.Fatalf("acme resume got %q, want %q", m.Data, acme1)
	}
	g := e.dialWSAs("key-globex", gatewaytest.RConsumerHello)
	g.Subscribe("r", `"from":[{"session":"s-shared","epoch":0,"seq":0}]`)
	if b := g.NextFrame(); string(b) != globex1 {
		t.Fatalf("globex resume got %s, want %s", b, globex1)
	}
	// Live: each sees its own next event only.
	acme2, globex2 := rEvent("a-2", "s-shared", 0, 2), rEvent("g-2", "s-shared", 0, 2)
	e.postAs("key-globex", globex2)
	e.postAs("key-acme", acme2)
	if m := a.nextEvent(); m.Data != acme2 {
		t.Fatalf("acme live got %q, want %q", m.Data, acme2)
	}
	if b := g.NextFrame(); string(b) != globex2 {
		t.Fatalf("globex live got %s, want %s", b, globex2)
	}
}
