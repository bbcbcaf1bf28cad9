package gateway

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/aep-gateway/aep-gateway/gateway/principal"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// JWTVerifier authenticates bearer tokens that are JSON Web Tokens (RFC 7519)
// signed with HS256, RS256 or ES256 (verified by go-jose's jwt package), and takes the tenant from a claim. The
// key is static (NewJWTVerifierHMAC, NewJWTVerifierPEM) or looked up by the
// token's kid in a JWKS (NewJWTVerifierJWKS).
// Unsigned tokens ("alg":"none") and any other algorithm are refused, as is
// an algorithm the configured key does not match (no RS256/HS256 confusion).
type JWTVerifier struct {
	hmacKey []byte
	rsaKey  *rsa.PublicKey
	ecKey   *ecdsa.PublicKey
	jwks    *JWKS // keys by kid, when set

	// TenantClaim names the claim holding the tenant. Zero means "tenant".
	TenantClaim string
	// Issuer and Audience, when set, must match iss and (one of) aud.
	Issuer, Audience string
	// Leeway tolerates clock skew on exp and nbf.
	Leeway time.Duration
	now    func() time.Time
}

// NewJWTVerifierHMAC verifies HS256 tokens with secret (at least 32 bytes).
func NewJWTVerifierHMAC(secret []byte) (*JWTVerifier, error) {
	if len(secret) < 32 {
		return nil, errors.New("jwt: HS256 secret must be at least 32 bytes")
	}
	return &JWTVerifier{hmacKey: secret, now: time.Now}, nil
}

// NewJWTVerifierPEM verifies RS256 or ES256 (P-256) tokens with a PEM public key.
func NewJWTVerifierPEM(pemBytes []byte) (*JWTVerifier, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, errors.New("jwt: no PEM block in the public key file")
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("jwt: public key: %w", err)
	}
	v := &JWTVerifier{now: time.Now}
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return nil, errors.New("jwt: RSA keys must have at least 2048 bits")
		}
		v.rsaKey = k
	case *ecdsa.PublicKey:
		if k.Curve.Params().Name != "P-256" {
			return nil, errors.New("jwt: only P-256 EC keys (ES256) are supported")
		}
		v.ecKey = k
	default:
		return nil, fmt.Errorf("jwt: unsupported public key type %T", pub)
	}
	return v, nil
}

var errJWT = errors.New("invalid token")

// MaxJWTLifetime is how far in the future a token's exp may lie: a token
// that would stay valid longer is refused, so no token outlives a year of
// revocations (exp 9.2e18 used to be "never").
const MaxJWTLifetime = 366 * 24 * time.Hour

// looksLikeJWT reports whether a bearer token has the JWS compact shape.
func looksLikeJWT(tok string) bool { return strings.Count(tok, ".") == 2 }

// Tenant verifies tok and returns its tenant: go-jose's jwt package
// parses it (only the algorithm of the configured key, or RS256/ES256 for a
// JWKS, is accepted: "none" and algorithm confusion are refused there),
// verifies the signature and checks iss, aud, exp, nbf and iat with
// Leeway; the gateway adds that exp is required and at most
// MaxJWTLifetime ahead, that the time claims lie in [0, year 9999], and
// takes the tenant from TenantClaim.
func (v *JWTVerifier) Tenant(tok string) (string, error) {
	t, _, err := v.Principal(tok)
	return t, err
}

// Principal is Tenant with the principal the token names: its sub (or
// "jwt" when it has none), and its scopes from the standard scope claim
// (RFC 8693 §4.2: space-separated; a JSON array is taken too). A token
// without a scope claim has the tenant-wide default policy.
func (v *JWTVerifier) Principal(tok string) (string, *principal.Principal, error) {
	if len(tok) > 8<<10 {
		return "", nil, fmt.Errorf("%w: too long", errJWT)
	}
	algs := v.algorithms()
	parsed, err := jwt.ParseSigned(tok, algs)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", errJWT, err)
	}
	key, err := v.key(parsed.Headers[0])
	if err != nil {
		return "", nil, err
	}
	var std jwt.Claims
	var claims map[string]any
	if err := parsed.Claims(key, &std, &claims); err != nil {
		return "", nil, fmt.Errorf("%w: %w", errJWT, err)
	}
	if err := v.checkClaims(std); err != nil {
		return "", nil, err
	}
	name := v.TenantClaim
	if name == "" {
		name = "tenant"
	}
	tenant, _ := claims[name].(string)
	if err := partitioning.ValidateTenant(tenant); err != nil {
		return "", nil, fmt.Errorf("%w: claim %q: %w", errJWT, name, err)
	}
	p := &principal.Principal{ID: "jwt", Method: principal.MethodJWT}
	if std.Subject != "" {
		if err := validPrincipalID(std.Subject); err != nil {
			return "", nil, fmt.Errorf("%w: sub: %w", errJWT, err)
		}
		p.ID = std.Subject
	}
	if raw, ok := claims["scope"]; ok {
		list, err := scopeClaim(raw)
		if err == nil {
			p.Scopes, err = principal.ParseScopes(list)
		}
		if err != nil {
			return "", nil, fmt.Errorf("%w: scope: %w", errJWT, err)
		}
	}
	return tenant, p, nil
}

// scopeClaim is the scope claim as one space-separated list: a string, or
// an array of strings.
func scopeClaim(raw any) (string, error) {
	switch v := raw.(type) {
	case string:
		return v, nil
	case []any:
		parts := make([]string, 0, len(v))
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return "", errors.New("an array of strings or one space-separated string")
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, " "), nil
	}
	return "", errors.New("an array of strings or one space-separated string")
}

// algorithms are the signature algorithms a token may name: the one of
// the static key, or those a JWKS holds keys for.
func (v *JWTVerifier) algorithms() []jose.SignatureAlgorithm {
	switch {
	case v.jwks != nil:
		return []jose.SignatureAlgorithm{jose.RS256, jose.ES256}
	case v.hmacKey != nil:
		return []jose.SignatureAlgorithm{jose.HS256}
	case v.rsaKey != nil:
		return []jose.SignatureAlgorithm{jose.RS256}
	default:
		return []jose.SignatureAlgorithm{jose.ES256}
	}
}

// key is the verification key for a token with header h: the static key,
// or the JWKS key named by its kid, whose type and "alg" must fit the
// token's algorithm.
func (v *JWTVerifier) key(h jose.Header) (any, error) {
	if v.jwks == nil {
		switch {
		case v.hmacKey != nil:
			return v.hmacKey, nil
		case v.rsaKey != nil:
			return v.rsaKey, nil
		default:
			return v.ecKey, nil
		}
	}
	k, ok := v.jwks.key(h.KeyID)
	if !ok {
		return nil, fmt.Errorf("%w: unknown key id %q", errJWT, h.KeyID)
	}
	if k.alg != "" && k.alg != h.Algorithm {
		return nil, fmt.Errorf("%w: algorithm %q is not the key's", errJWT, h.Algorithm)
	}
	switch {
	case h.Algorithm == string(jose.RS256) && k.rsa != nil:
		return k.rsa, nil
	case h.Algorithm == string(jose.ES256) && k.ec != nil:
		return k.ec, nil
	}
	return nil, fmt.Errorf("%w: algorithm %q does not fit key %q", errJWT, h.Algorithm, h.KeyID)
}

// maxJWTTime bounds the NumericDate claims (exp, nbf, iat): the last
// second of year 9999. Below 0 or above it a claim is refused as out of
// range.
const maxJWTTime = 253402300799

// checkClaims checks the claims: exp is required and at most
// MaxJWTLifetime ahead, every time claim is in [0, maxJWTTime], and
// go-jose's validation (iss, aud, exp, nbf, iat with Leeway) passes.
func (v *JWTVerifier) checkClaims(c jwt.Claims) error {
	now := v.now()
	for name, d := range map[string]*jwt.NumericDate{"exp": c.Expiry, "nbf": c.NotBefore, "iat": c.IssuedAt} {
		if d != nil && (*d < 0 || *d > maxJWTTime) {
			return fmt.Errorf("%w: %s is out of range", errJWT, name)
		}
	}
	if c.Expiry == nil {
		return fmt.Errorf("%w: exp is required", errJWT)
	}
	if c.Expiry.Time().After(now.Add(MaxJWTLifetime + v.Leeway)) {
		return fmt.Errorf("%w: exp is more than %s ahead", errJWT, MaxJWTLifetime)
	}
	want := jwt.Expected{Issuer: v.Issuer, Time: now}
	if v.Audience != "" {
		want.AnyAudience = jwt.Audience{v.Audience}
	}
	if err := c.ValidateWithLeeway(want, v.Leeway); err != nil {
		return fmt.Errorf("%w: %w", errJWT, err)
	}
	return nil
}
