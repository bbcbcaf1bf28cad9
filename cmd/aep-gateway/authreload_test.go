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
	"strings"
	"syscall"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/cursor"
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
	r := startAuthReloader(cfg, reloadable{keys: keys, jwt: jwt}, zerolog.New(io.Discard), nil)
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
	r := startAuthReloader(cfg, reloadable{keys: keys, jwt: jwt}, zerolog.New(io.Discard), nil)
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
	r := startAuthReloader(cfg, reloadable{keys: keys, jwt: jwt}, zerolog.New(io.Discard), nil)
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

// A key rotated in place at the same length, with the modification time
// put back (cp -p, rsync -t), is seen by its content: the old key is
// refused within the reload interval (issue 31: it stayed valid until
// SIGHUP).
func TestAPIKeyRotatedInPlaceSameSizeSameMtime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	writeAged(t, path, keyLine("acme", "old-key-1"), time.Hour)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config{APIKeys: path, AuthReloadInterval: 50 * time.Millisecond}
	keys, jwt, err := loadAuth(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := startAuthReloader(cfg, reloadable{keys: keys, jwt: jwt}, zerolog.New(io.Discard), nil)
	defer r.Close()
	if _, ok := keys.Tenant("old-key-1"); !ok {
		t.Fatal("old key refused before the rotation")
	}
	writeAged(t, path, keyLine("acme", "new-key-1"), 0)
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if st2, _ := os.Stat(path); !st2.ModTime().Equal(st.ModTime()) || st2.Size() != st.Size() {
		t.Fatal("the rotated file differs in size or mtime: the test proves nothing")
	}
	start := time.Now()
	waitUntil(t, "old key refused after an in-place rotation", func() bool { _, ok := keys.Tenant("old-key-1"); return !ok })
	t.Logf("old key refused %s after the rotation (reload interval %s)", time.Since(start).Round(time.Millisecond), cfg.AuthReloadInterval)
	if _, ok := keys.Tenant("new-key-1"); !ok {
		t.Fatal("new key refused after the rotation")
	}
}

// A key file rewritten in two steps never takes effect half-written: a
// first step that does not parse keeps the keys in use (counted as a
// failed reload), and one that parses but is followed by the second step
// within the settle time never replaces them either, so no tenant is
// locked out in between (issue 31: a tenant was locked out for 4.5 s).
func TestKeyFileWrittenInTwoStepsNeverLocksOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	full := keyLine("acme", "a") + keyLine("globex", "g")
	writeAged(t, path, full, time.Hour)
	cfg := config{APIKeys: path} // no ticker: the test drives check itself
	keys, jwt, err := loadAuth(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r := startAuthReloader(cfg, reloadable{keys: keys, jwt: jwt}, zerolog.New(io.Discard), reg)
	defer r.Close()
	bothValid := func(step string) {
		t.Helper()
		if _, ok := keys.Tenant("a"); !ok {
			t.Fatalf("%s: acme locked out", step)
		}
		if _, ok := keys.Tenant("g"); !ok {
			t.Fatalf("%s: globex locked out", step)
		}
	}
	next := keyLine("acme", "a") + keyLine("globex", "g") + keyLine("initech", "i")
	// Step 1 cut mid-line, left so for longer than the settle time: does
	// not parse.
	writeAged(t, path, next[:len(keyLine("acme", "a"))+10], time.Minute)
	waitUntil(t, "the cut file is tried", func() bool {
		r.check(false)
		return counterValue(t, r.reloads.WithLabelValues("--api-keys", "failed")) > 0
	})
	r.check(false)
	bothValid("a file cut mid-line")
	if got := counterValue(t, r.reloads.WithLabelValues("--api-keys", "failed")); got != 1 {
		t.Fatalf("failed reloads counted: %v, want 1 (once per content)", got)
	}
	// Step 1 cut at a line end: parses, without globex.
	writeAged(t, path, keyLine("acme", "a"), 50*time.Second)
	r.check(false)
	bothValid("a file cut at a line end")
	// Step 2: the whole file, which takes effect once it stays the same.
	writeAged(t, path, next, 40*time.Second)
	r.check(false)
	bothValid("the whole file, just written")
	waitUntil(t, "the whole file takes effect", func() bool {
		r.check(false)
		_, ok := keys.Tenant("i")
		return ok
	})
	bothValid("the whole file")
	if got := counterValue(t, r.reloads.WithLabelValues("--api-keys", "reloaded")); got != 1 {
		t.Fatalf("reloads counted: %v, want 1", got)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// The cursor key file reloads like the credentials (issue 24: a rotation
// during a rolling update must not break resumes): a cursor signed by the
// old key still decodes once the new key signs, while the old key is kept
// as a verifier, and no longer after it is dropped; a broken file keeps
// the keys in use.
func TestCursorKeysReloadedOnChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cursor-keys")
	oldKey, newKey := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	writeAged(t, path, "1 "+oldKey+"\n", time.Hour)
	cfg := config{CursorKeys: path, AuthReloadInterval: 20 * time.Millisecond}
	kr, err := loadCursorKeys(cfg, zerolog.New(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	r := startAuthReloader(cfg, reloadable{cursors: kr}, zerolog.New(io.Discard), nil)
	defer r.Close()
	c := cursor.Cursor{Partitions: 1, Offsets: []cursor.PartitionOffset{{Partition: 0, Offset: 7}}}
	old, err := kr.Encode("acme", c)
	if err != nil {
		t.Fatal(err)
	}
	writeAged(t, path, "2 "+newKey+"\n1 "+oldKey+"\n", time.Minute)
	waitUntil(t, "the new signing key", func() bool { return kr.SigningKeyID() == 2 })
	if _, err := kr.Decode("acme", old); err != nil {
		t.Fatalf("a cursor of the old key, still a verifier: %v", err)
	}
	writeAged(t, path, "2 "+newKey+"\n", 30*time.Second)
	waitUntil(t, "the old key dropped", func() bool { _, err := kr.Decode("acme", old); return err != nil })
	writeAged(t, path, "not a key file\n", 20*time.Second)
	time.Sleep(100 * time.Millisecond)
	if kr.SigningKeyID() != 2 {
		t.Fatal("a broken cursor key file replaced the keys in use")
	}
}
