package gateway

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// signKid signs claims as a JWS with header {alg, kid} and key k (RSA or
// P-256 EC).
func signKid(t *testing.T, k crypto.Signer, alg, kid string, claims any) string {
	t.Helper()
	in := b64(map[string]string{"alg": alg, "kid": kid, "typ": "JWT"}) + "." + b64(claims)
	d := sha256.Sum256([]byte(in))
	var sig []byte
	switch key := k.(type) {
	case *rsa.PrivateKey:
		sig, _ = rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, d[:])
	case *ecdsa.PrivateKey:
		r, s, _ := ecdsa.Sign(rand.Reader, key, d[:])
		sig = make([]byte, 64)
		r.FillBytes(sig[:32])
		s.FillBytes(sig[32:])
	}
	return in + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// jwksServer serves a JWKS that the test rotates, counting fetches.
type jwksServer struct {
	mu      sync.Mutex
	doc     []byte
	fetches atomic.Int32
	srv     *httptest.Server
}

func newJWKSServer(t *testing.T) *jwksServer {
	j := &jwksServer{}
	j.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		j.fetches.Add(1)
		j.mu.Lock()
		defer j.mu.Unlock()
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(j.doc)
	}))
	t.Cleanup(j.srv.Close)
	return j
}

// publish serves the public halves of keys, by kid.
func (j *jwksServer) publish(t *testing.T, keys map[string]crypto.Signer) {
	t.Helper()
	var set jose.JSONWebKeySet
	for kid, k := range keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.Public(), KeyID: kid, Use: "sig"})
	}
	raw, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	j.mu.Lock()
	j.doc = raw
	j.mu.Unlock()
}

func TestJWKSRotationWithoutRestart(t *testing.T) {
	k1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	k2, _ := rsa.GenerateKey(rand.Reader, 2048)
	js := newJWKSServer(t)
	js.publish(t, map[string]crypto.Signer{"k1": k1})

	set, err := NewJWKSURL(context.Background(), js.srv.URL, nil, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Close)
	g := newTestGateway(t, func(c *Config) { c.JWT = NewJWTVerifierJWKS(set) })
	claims := map[string]any{"tenant": "acme", "exp": time.Now().Add(time.Hour).Unix()}
	ingest := func(tok string) int {
		return g.post("/aep/events", "application/json", map[string]string{"Authorization": "Bearer " + tok}, []byte(dEvent(1, "s"))).status
	}
	if st := ingest(signKid(t, k1, "ES256", "k1", claims)); st != http.StatusAccepted {
		t.Fatalf("token of k1: %d", st)
	}
	// Refused whatever the set holds: no kid, an alg that does not fit
	// the key, a key that is not the kid's.
	for name, tok := range map[string]string{
		"no kid":         signKid(t, k1, "ES256", "", claims),
		"alg of another": signKid(t, k1, "RS256", "k1", claims),
		"wrong key":      signKid(t, k2, "RS256", "k1", claims),
	} {
		if st := ingest(tok); st != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", name, st)
		}
	}

	// Rotation: k2 is published beside k1, then k1 is withdrawn.
	js.publish(t, map[string]crypto.Signer{"k1": k1, "k2": k2})
	waitFor(t, func() bool { return ingest(signKid(t, k2, "RS256", "k2", claims)) == http.StatusAccepted })
	js.publish(t, map[string]crypto.Signer{"k2": k2})
	waitFor(t, func() bool { return ingest(signKid(t, k1, "ES256", "k1", claims)) == http.StatusUnauthorized })
	if st := ingest(signKid(t, k2, "RS256", "k2", claims)); st != http.StatusAccepted {
		t.Fatalf("token of k2 after the rotation: %d", st)
	}
}

func TestJWKSUnknownKidRefreshIsRateLimited(t *testing.T) {
	k1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	k2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	js := newJWKSServer(t)
	js.publish(t, map[string]crypto.Signer{"k1": k1})
	set, err := NewJWKSURL(context.Background(), js.srv.URL, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Close)
	v := NewJWTVerifierJWKS(set)
	claims := map[string]any{"tenant": "acme", "exp": time.Now().Add(time.Hour).Unix()}

	// A key published after start is found by the first token naming it.
	set.mu.Lock()
	set.lastFetch = time.Time{}
	set.mu.Unlock()
	js.publish(t, map[string]crypto.Signer{"k1": k1, "k2": k2})
	if tn, err := v.Tenant(signKid(t, k2, "ES256", "k2", claims)); err != nil || tn != "acme" {
		t.Fatalf("new kid: %q %v", tn, err)
	}
	// A flood of unknown kids costs at most one fetch per interval.
	before := js.fetches.Load()
	for i := range 50 {
		if _, err := v.Tenant(signKid(t, k1, "ES256", fmt.Sprintf("forged-%d", i), claims)); err == nil {
			t.Fatal("unknown kid accepted")
		}
	}
	if n := js.fetches.Load() - before; n > 1 {
		t.Fatalf("50 unknown kids caused %d fetches, want at most 1 per %s", n, MinRefreshInterval)
	}
}

func TestParseJWKS(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ec384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	doc := func(keys ...jose.JSONWebKey) []byte {
		raw, _ := json.Marshal(jose.JSONWebKeySet{Keys: keys})
		return raw
	}
	set, err := ParseJWKS(doc(
		jose.JSONWebKey{Key: ec.Public(), KeyID: "ok"},
		jose.JSONWebKey{Key: ec.Public()}, // no kid
		jose.JSONWebKey{Key: ec384.Public(), KeyID: "p384"},
		jose.JSONWebKey{Key: small.Public(), KeyID: "rsa1024"},
		jose.JSONWebKey{Key: ec.Public(), KeyID: "enc", Use: "enc"},
		jose.JSONWebKey{Key: []byte("0123456789abcdef0123456789abcdef"), KeyID: "oct", Algorithm: "HS256"},
	))
	if err != nil || set.Len() != 1 {
		t.Fatalf("usable keys: %v %v", set, err)
	}
	if _, err := ParseJWKS(doc(jose.JSONWebKey{Key: small.Public(), KeyID: "x"})); err == nil {
		t.Fatal("a set without a usable key was accepted")
	}
	if _, err := ParseJWKS([]byte(`{"keys":[{"kty":"EC"}]}`)); err == nil {
		t.Fatal("a malformed set was accepted")
	}
}
