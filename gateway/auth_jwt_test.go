package gateway

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func b64(v any) string {
	raw, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(raw)
}

func signHS(secret []byte, hdr, claims any) string {
	in := b64(hdr) + "." + b64(claims)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(in))
	return in + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func signRS(k *rsa.PrivateKey, claims any) string {
	in := b64(map[string]string{"alg": "RS256", "typ": "JWT"}) + "." + b64(claims)
	d := sha256.Sum256([]byte(in))
	sig, _ := rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, d[:])
	return in + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func signES(k *ecdsa.PrivateKey, claims any) string {
	in := b64(map[string]string{"alg": "ES256"}) + "." + b64(claims)
	d := sha256.Sum256([]byte(in))
	r, s, _ := ecdsa.Sign(rand.Reader, k, d[:])
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return in + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func pemOf(t testing.TB, pub any) []byte {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func TestJWTVerifier(t *testing.T) {
	now := time.Unix(2_000_000_000, 0)
	secret := []byte(strings.Repeat("s", 32))
	hs, err := NewJWTVerifierHMAC(secret)
	if err != nil {
		t.Fatal(err)
	}
	hs.now = func() time.Time { return now }
	hs.Issuer, hs.Audience = "idp", "aep"
	ok := map[string]any{"tenant": "acme", "exp": now.Add(time.Minute).Unix(), "iss": "idp", "aud": []string{"x", "aep"}}
	hdr := map[string]string{"alg": "HS256", "typ": "JWT"}
	if tn, err := hs.Tenant(signHS(secret, hdr, ok)); err != nil || tn != "acme" {
		t.Fatalf("valid HS256: %q %v", tn, err)
	}
	with := func(k string, v any) map[string]any {
		c := map[string]any{}
		for kk, vv := range ok {
			c[kk] = vv
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	bad := map[string]string{
		"expired":       signHS(secret, hdr, with("exp", now.Add(-time.Minute).Unix())),
		"no exp":        signHS(secret, hdr, with("exp", nil)),
		"not yet":       signHS(secret, hdr, with("nbf", now.Add(time.Hour).Unix())),
		"wrong issuer":  signHS(secret, hdr, with("iss", "evil")),
		"wrong aud":     signHS(secret, hdr, with("aud", "other")),
		"no tenant":     signHS(secret, hdr, with("tenant", nil)),
		"bad tenant":    signHS(secret, hdr, with("tenant", "a.b")),
		"other secret":  signHS([]byte(strings.Repeat("x", 32)), hdr, ok),
		"alg none":      b64(map[string]string{"alg": "none"}) + "." + b64(ok) + ".",
		"alg RS256":     signHS(secret, map[string]string{"alg": "RS256"}, ok),
		"tampered":      strings.Replace(signHS(secret, hdr, ok), ".", ".x", 1),
		"two segments":  "a.b",
		"exp too far":   signHS(secret, hdr, with("exp", now.Add(2*MaxJWTLifetime).Unix())),
		"exp negative":  signHS(secret, hdr, with("exp", -1)),
		"exp huge":      signHS(secret, hdr, with("exp", 9.2e18)),
		"exp a string":  signHS(secret, hdr, with("exp", "tomorrow")),
		"nbf huge":      signHS(secret, hdr, with("nbf", 9.2e18)),
		"iat future":    signHS(secret, hdr, with("iat", now.Add(time.Hour).Unix())),
		"crit unknown":  signHS(secret, map[string]any{"alg": "HS256", "crit": []string{"x-must"}, "x-must": 1}, ok),
		"garbage parts": "!!.??.##",
	}
	for name, tok := range bad {
		if tn, err := hs.Tenant(tok); err == nil {
			t.Errorf("%s: accepted as %q", name, tn)
		}
	}

	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	rs, err := NewJWTVerifierPEM(pemOf(t, &rk.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	claims := map[string]any{"tenant": "globex", "exp": time.Now().Add(time.Minute).Unix()}
	if tn, err := rs.Tenant(signRS(rk, claims)); err != nil || tn != "globex" {
		t.Fatalf("RS256: %q %v", tn, err)
	}
	// Algorithm confusion: an HS256 token "signed" with the RSA public key bytes.
	if _, err := rs.Tenant(signHS(pemOf(t, &rk.PublicKey), hdr, claims)); err == nil {
		t.Fatal("HS256 accepted by an RS256 verifier")
	}
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	es, err := NewJWTVerifierPEM(pemOf(t, &ek.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	if tn, err := es.Tenant(signES(ek, claims)); err != nil || tn != "globex" {
		t.Fatalf("ES256: %q %v", tn, err)
	}
	if _, err := NewJWTVerifierHMAC([]byte("short")); err == nil {
		t.Fatal("short HMAC secret accepted")
	}
}

func TestJWTAndKeysTogether(t *testing.T) {
	secret := []byte(strings.Repeat("k", 32))
	jv, _ := NewJWTVerifierHMAC(secret)
	ks, _ := ParseKeyStore(strings.NewReader("acme sha256:" + sha256hex("plain-key") + "\n"))
	g := newTestGateway(t, func(c *Config) { c.Keys, c.JWT = ks, jv })
	tok := signHS(secret, map[string]string{"alg": "HS256"}, map[string]any{"tenant": "initech", "exp": time.Now().Add(time.Minute).Unix()})
	resp := g.post("/aep/events", "application/json", map[string]string{"Authorization": "Bearer " + tok}, []byte(dEvent(0, "s")))
	if resp.status != http.StatusAccepted || resp.json(t)["topic"] != "aep.initech.events" {
		t.Fatalf("JWT tenant: %d %s", resp.status, resp.body)
	}
	resp = g.post("/aep/events", "application/json", map[string]string{"Authorization": "Bearer plain-key"}, []byte(dEvent(1, "s")))
	if resp.status != http.StatusAccepted || resp.json(t)["topic"] != "aep.acme.events" {
		t.Fatalf("API key tenant: %d %s", resp.status, resp.body)
	}
	resp = g.post("/aep/events", "application/json", map[string]string{"Authorization": "Bearer " + tok + "x"}, []byte(dEvent(2, "s")))
	if resp.status != http.StatusUnauthorized {
		t.Fatalf("bad JWT: %d %s", resp.status, resp.body)
	}
}

// A refused credential is answered 401 and leaves one debug line naming
// the reason (never the token); at info, nothing but the access line.
func TestRefusedCredentialLoggedAtDebugWithReason(t *testing.T) {
	secret := []byte(strings.Repeat("k", 32))
	jv, _ := NewJWTVerifierHMAC(secret)
	ks, _ := ParseKeyStore(strings.NewReader("acme sha256:" + sha256hex("plain-key") + "\n"))
	expired := signHS(secret, map[string]string{"alg": "HS256"}, map[string]any{"tenant": "initech", "exp": time.Now().Add(-time.Hour).Unix()})
	for _, lvl := range []zerolog.Level{zerolog.InfoLevel, zerolog.DebugLevel} {
		sink := &logSink{}
		g := newTestGateway(t, func(c *Config) { c.Keys, c.JWT, c.Logger = ks, jv, zerolog.New(sink).Level(lvl) })
		for _, tok := range []string{expired, "no-such-key"} {
			resp := g.post("/aep/events", "application/json", map[string]string{"Authorization": "Bearer " + tok}, []byte(dEvent(0, "s")))
			if resp.status != http.StatusUnauthorized {
				t.Fatalf("%d %s", resp.status, resp.body)
			}
		}
		var refused []map[string]any
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			refused = refused[:0]
			for _, l := range sink.lines(t) {
				if l["message"] == "credential refused" {
					refused = append(refused, l)
				}
			}
			if lvl == zerolog.InfoLevel || len(refused) == 2 || time.Now().After(deadline) {
				break
			}
		}
		if lvl == zerolog.InfoLevel {
			if len(refused) != 0 {
				t.Fatalf("refusal lines at info: %v", refused)
			}
			continue
		}
		if len(refused) != 2 {
			t.Fatalf("%d refusal lines at debug, want 2: %v", len(refused), refused)
		}
		if l := refused[0]; l["level"] != "debug" || !strings.Contains(fmt.Sprint(l["reason"]), "expired") || l["credential"] != "jwt" || l["request_id"] == "" {
			t.Errorf("expired JWT line: %v", l)
		}
		if l := refused[1]; l["credential"] != "api_key" || l["reason"] != "unknown API key" {
			t.Errorf("unknown key line: %v", l)
		}
		if s := sink.text(); strings.Contains(s, expired) || strings.Contains(s, "no-such-key") {
			t.Error("a token reached the log")
		}
	}
}
