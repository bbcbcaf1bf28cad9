package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func sha256hex(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}

func TestParseKeyStore(t *testing.T) {
	ks, err := ParseKeyStore(strings.NewReader("acme sha256:" + sha256hex("secret") + "\n\n# c\n"))
	if err != nil {
		t.Fatal(err)
	}
	if tn, ok := ks.Tenant("secret"); !ok || tn != "acme" {
		t.Fatalf("tenant %q %v", tn, ok)
	}
	if _, ok := ks.Tenant(""); ok {
		t.Fatal("empty key accepted")
	}
	bad := []string{
		"",
		"acme " + sha256hex("x"),
		"acme sha256:abcd",
		"a.b sha256:" + sha256hex("x"),
		"acme sha256:" + sha256hex("x") + " extra",
		"acme sha256:" + sha256hex("x") + "\nglobex sha256:" + sha256hex("x"),
	}
	for _, b := range bad {
		if _, err := ParseKeyStore(strings.NewReader(b)); err == nil {
			t.Errorf("accepted %q", b)
		}
	}
}

func TestKeyStoreReplace(t *testing.T) {
	ks, err := ParseKeyStore(strings.NewReader("acme sha256:" + sha256hex("old") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	auth := Authenticator{Keys: ks} // holds the pointer, as the router does
	next, err := ParseKeyStore(strings.NewReader("acme sha256:" + sha256hex("new") + "\nglobex sha256:" + sha256hex("g") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	ks.Replace(next)
	if _, ok := auth.Tenant("old"); ok {
		t.Fatal("removed key still accepted")
	}
	if tn, ok := auth.Tenant("g"); !ok || tn != "globex" || ks.Len() != 2 {
		t.Fatalf("added key: %q %v, %d keys", tn, ok, ks.Len())
	}
}
