package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/principal"
)

// A key line's principal= and scopes= make its principal; a line without
// them is tenant-wide and named by its digest; a bad option refuses the
// whole file (the keys in use stay, as for any file that does not parse).
func TestKeyFilePrincipals(t *testing.T) {
	ks, err := ParseKeyStore(strings.NewReader(
		"acme sha256:" + sha256hex("a") + " principal=agent-a scopes=emit:agent:a,write:tool\n" +
			"acme sha256:" + sha256hex("b") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	auth := Authenticator{Keys: ks}
	tn, kind, p, err := auth.resolve("a")
	if err != nil || tn != "acme" || kind != credAPIKey || p.ID != "agent-a" || p.Method != principal.MethodAPIKey || !p.Restricted() ||
		!p.MayEmitAs("agent:a") || p.MayEmitAs("agent:b") || !p.MayTarget("tool:x") {
		t.Fatalf("scoped key: %q %q %+v %v", tn, kind, p, err)
	}
	if _, _, p, _ := auth.resolve("b"); p.ID != "key:"+sha256hex("b")[:8] || p.Restricted() {
		t.Fatalf("key without options: %+v", p)
	}
	for _, opts := range []string{"extra", "principal=", "principal=" + strings.Repeat("p", 257), "principal=a\x01b", "scopes=delete:x", "scopes=read:", "role=admin"} {
		if _, err := ParseKeyStore(strings.NewReader("acme sha256:" + sha256hex("a") + " " + opts + "\n")); err == nil {
			t.Errorf("option %q accepted", opts)
		}
	}
}

// A JWT's sub is its principal and its scope claim (a string or an array)
// its scopes; without scope it is tenant-wide; a scope claim that does not
// parse refuses the token.
func TestJWTPrincipal(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	v, err := NewJWTVerifierHMAC(secret)
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).Unix()
	hdr := map[string]string{"alg": "HS256", "typ": "JWT"}
	for _, c := range []struct {
		name   string
		claims map[string]any
		id     string
		scoped bool
		ok     bool
	}{
		{"string scope", map[string]any{"tenant": "acme", "exp": exp, "sub": "dash", "scope": "subscribe:task.* read:agent"}, "dash", true, true},
		{"array scope", map[string]any{"tenant": "acme", "exp": exp, "sub": "dash", "scope": []string{"subscribe:task.*"}}, "dash", true, true},
		{"no scope", map[string]any{"tenant": "acme", "exp": exp, "sub": "svc"}, "svc", false, true},
		{"no sub", map[string]any{"tenant": "acme", "exp": exp}, "jwt", false, true},
		{"bad scope", map[string]any{"tenant": "acme", "exp": exp, "sub": "x", "scope": "admin:all"}, "", false, false},
		{"scope not a string", map[string]any{"tenant": "acme", "exp": exp, "sub": "x", "scope": 7}, "", false, false},
		{"sub with a space", map[string]any{"tenant": "acme", "exp": exp, "sub": "a b"}, "", false, false},
	} {
		tn, p, err := v.Principal(signHS(secret, hdr, c.claims))
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v", c.name, err)
			continue
		}
		if !c.ok {
			continue
		}
		if tn != "acme" || p.ID != c.id || p.Method != principal.MethodJWT || p.Restricted() != c.scoped {
			t.Errorf("%s: %q %+v", c.name, tn, p)
		}
	}
	_, p, err := v.Principal(signHS(secret, hdr, map[string]any{"tenant": "acme", "exp": exp, "sub": "dash", "scope": "subscribe:task.*"}))
	if err != nil || p.CoverTypes([]string{"memory.*"}) == "" || p.CoverTypes([]string{"task.done"}) != "" {
		t.Errorf("the scope claim does not restrict: %+v %v", p, err)
	}
}

// A cert: line names a client certificate by its subject CN: its principal
// is the CN unless principal= says otherwise, authenticated as mtls; a
// CN given twice, or one a header could not carry, refuses the file.
func TestKeyFileCertLines(t *testing.T) {
	ks, err := ParseKeyStore(strings.NewReader("acme cert:agent-a scopes=emit:agent:a\nglobex cert:svc principal=billing\n"))
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := ks.lookupCert("agent-a"); !ok || e.tenant != "acme" || e.principal.ID != "agent-a" || e.principal.Method != principal.MethodMTLS || !e.principal.Restricted() {
		t.Fatalf("agent-a: %+v %v", e, ok)
	}
	if e, ok := ks.lookupCert("svc"); !ok || e.principal.ID != "billing" || e.principal.Restricted() {
		t.Fatalf("svc: %+v %v", e, ok)
	}
	if _, ok := ks.lookup("agent-a"); ok || ks.Len() != 2 {
		t.Fatal("a certificate's CN is not an API key")
	}
	for _, f := range []string{"acme cert:a\nacme cert:a\n", "acme cert:\n", "acme cert:a\x01\n"} {
		if _, err := ParseKeyStore(strings.NewReader(f)); err == nil {
			t.Errorf("%q accepted", f)
		}
	}
}
