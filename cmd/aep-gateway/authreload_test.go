package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/gateway"
)

func keyLine(tenant, key string) string {
	d := sha256.Sum256([]byte(key))
	return tenant + " sha256:" + hex.EncodeToString(d[:]) + "\n"
}

// writeAged writes a file with a modification time of its own, so that a
// rewrite within the file system's time granularity is still seen.
func writeAged(t *testing.T, path, content string, age time.Duration) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	mt := time.Now().Add(-age)
	if err := os.Chtimes(path, mt, mt); err != nil {
		t.Fatal(err)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAPIKeyFileReloadedOnChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	writeAged(t, path, keyLine("acme", "old"), time.Hour)
	cfg := config{APIKeys: path, AuthReloadInterval: 20 * time.Millisecond}
	keys, jwt, err := loadAuth(cfg)
	if err != nil {
		t.Fatal(err)
	}
	auth := gateway.Authenticator{Keys: keys, JWT: jwt}
	r := startAuthReloader(cfg, keys, jwt, zerolog.New(io.Discard))
	defer r.Close()

	writeAged(t, path, keyLine("acme", "new")+keyLine("globex", "g"), time.Minute)
	waitUntil(t, "new key accepted", func() bool { tn, ok := auth.Tenant("new"); return ok && tn == "acme" })
	if _, ok := auth.Tenant("old"); ok {
		t.Fatal("removed key still accepted after the reload")
	}
	// A broken file keeps the keys in use.
	writeAged(t, path, "not a key file\n", 30*time.Second)
	time.Sleep(100 * time.Millisecond) // several reload periods
	if tn, ok := auth.Tenant("g"); !ok || tn != "globex" {
		t.Fatal("a broken key file replaced the keys in use")
	}
}

func TestSIGHUPReloadsAPIKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	writeAged(t, path, keyLine("acme", "old"), time.Hour)
	cfg := config{APIKeys: path} // no polling: SIGHUP only
	keys, jwt, err := loadAuth(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := startAuthReloader(cfg, keys, jwt, zerolog.New(io.Discard))
	defer r.Close()
	writeAged(t, path, keyLine("acme", "new"), time.Hour) // same mtime: only a forced reload sees it
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "SIGHUP reload", func() bool { _, ok := keys.Tenant("new"); return ok })
}

func TestJWKSFileReloadedOnChange(t *testing.T) {
	k1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	k2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	doc := func(kid string, k *ecdsa.PrivateKey) string {
		raw, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: k.Public(), KeyID: kid, Algorithm: "ES256"}}})
		return string(raw)
	}
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeAged(t, path, doc("k1", k1), time.Hour)
	cfg := config{JWTJWKSFile: path, AuthReloadInterval: 20 * time.Millisecond}
	keys, jwt, err := loadAuth(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := startAuthReloader(cfg, keys, jwt, zerolog.New(io.Discard))
	defer r.Close()
	tok := func(kid string, k *ecdsa.PrivateKey) string {
		b64 := func(v any) string { raw, _ := json.Marshal(v); return base64.RawURLEncoding.EncodeToString(raw) }
		in := b64(map[string]string{"alg": "ES256", "kid": kid}) + "." + b64(map[string]any{"tenant": "acme", "exp": time.Now().Add(time.Hour).Unix()})
		d := sha256.Sum256([]byte(in))
		rr, ss, _ := ecdsa.Sign(rand.Reader, k, d[:])
		sig := make([]byte, 64)
		rr.FillBytes(sig[:32])
		ss.FillBytes(sig[32:])
		return in + "." + base64.RawURLEncoding.EncodeToString(sig)
	}
	if _, err := jwt.Tenant(tok("k1", k1)); err != nil {
		t.Fatalf("k1 before the rotation: %v", err)
	}
	writeAged(t, path, doc("k2", k2), time.Minute)
	waitUntil(t, "k2 accepted", func() bool { _, err := jwt.Tenant(tok("k2", k2)); return err == nil })
	if _, err := jwt.Tenant(tok("k1", k1)); err == nil {
		t.Fatal("k1 accepted after it left the file")
	}
}
