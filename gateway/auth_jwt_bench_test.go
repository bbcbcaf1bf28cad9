package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"strings"
	"testing"
	"time"
)

// BenchmarkJWTVerify is one token's verification per algorithm: parse,
// signature, claims and tenant, as every JWT-authenticated request pays.
func BenchmarkJWTVerify(b *testing.B) {
	claims := map[string]any{"tenant": "acme", "exp": time.Now().Add(time.Hour).Unix(), "iss": "idp", "aud": "aep"}
	secret := []byte(strings.Repeat("s", 32))
	hs, _ := NewJWTVerifierHMAC(secret)
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rsPEM, esPEM := pemOf(b, &rk.PublicKey), pemOf(b, &ek.PublicKey)
	rs, _ := NewJWTVerifierPEM(rsPEM)
	es, _ := NewJWTVerifierPEM(esPEM)
	for _, c := range []struct {
		name string
		v    *JWTVerifier
		tok  string
	}{
		{"HS256", hs, signHS(secret, map[string]string{"alg": "HS256", "typ": "JWT"}, claims)},
		{"RS256", rs, signRS(rk, claims)},
		{"ES256", es, signES(ek, claims)},
	} {
		c.v.Issuer, c.v.Audience = "idp", "aep"
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.v.Tenant(c.tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
