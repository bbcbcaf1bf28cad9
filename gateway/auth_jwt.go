package gateway

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/aep-gateway/aep-gateway/partitioning"
)

// JWTVerifier authenticates bearer tokens that are JSON Web Tokens (RFC 7519)
// signed with HS256, RS256 or ES256, and takes the tenant from a claim. The
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

// Tenant verifies tok and returns its tenant.
func (v *JWTVerifier) Tenant(tok string) (string, error) {
	if len(tok) > 8<<10 {
		return "", fmt.Errorf("%w: too long", errJWT)
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", fmt.Errorf("%w: not a JWS compact token", errJWT)
	}
	var hdr struct {
		Alg string `json:"alg"`
		Typ string `json:"typ"`
		Kid string `json:"kid"`
	}
	if err := decodeSegment(parts[0], &hdr); err != nil {
		return "", err
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return "", fmt.Errorf("%w: signature encoding", errJWT)
	}
	if err := v.verify(hdr.Alg, hdr.Kid, parts[0]+"."+parts[1], sig); err != nil {
		return "", err
	}
	var claims map[string]any
	if err := decodeSegment(parts[1], &claims); err != nil {
		return "", err
	}
	if err := v.checkClaims(claims); err != nil {
		return "", err
	}
	name := v.TenantClaim
	if name == "" {
		name = "tenant"
	}
	tenant, _ := claims[name].(string)
	if err := partitioning.ValidateTenant(tenant); err != nil {
		return "", fmt.Errorf("%w: claim %q: %w", errJWT, name, err)
	}
	return tenant, nil
}

func decodeSegment(seg string, v any) error {
	raw, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return fmt.Errorf("%w: segment encoding", errJWT)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%w: segment is not a JSON object", errJWT)
	}
	return nil
}

func (v *JWTVerifier) verify(alg, kid, signed string, sig []byte) error {
	if v.jwks != nil {
		return v.verifyJWKS(alg, kid, signed, sig)
	}
	digest := sha256.Sum256([]byte(signed))
	switch {
	case alg == "HS256" && v.hmacKey != nil:
		mac := hmac.New(sha256.New, v.hmacKey)
		mac.Write([]byte(signed))
		if !hmac.Equal(mac.Sum(nil), sig) {
			return fmt.Errorf("%w: bad signature", errJWT)
		}
	case alg == "RS256" && v.rsaKey != nil:
		if rsa.VerifyPKCS1v15(v.rsaKey, crypto.SHA256, digest[:], sig) != nil {
			return fmt.Errorf("%w: bad signature", errJWT)
		}
	case alg == "ES256" && v.ecKey != nil:
		if len(sig) != 64 {
			return fmt.Errorf("%w: bad signature", errJWT)
		}
		r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
		if !ecdsa.Verify(v.ecKey, digest[:], r, s) {
			return fmt.Errorf("%w: bad signature", errJWT)
		}
	default:
		return fmt.Errorf("%w: algorithm %q is not accepted", errJWT, alg)
	}
	return nil
}

// maxJWTTime bounds the NumericDate claims (exp, nbf, iat): the last
// second of year 9999. Below 0 or above it a claim is refused as out of
// range, rather than wrapping in a conversion.
const maxJWTTime = 253402300799

// checkClaims checks the time claims: exp is required and lies between
// now (minus Leeway) and MaxJWTLifetime ahead; nbf, when present, is
// passed; iat, when present, is not in the future (beyond Leeway). Every
// one of them is a number in [0, maxJWTTime].
func (v *JWTVerifier) checkClaims(c map[string]any) error {
	now := v.now()
	num := func(k string) (time.Time, bool, error) {
		raw, ok := c[k]
		if !ok {
			return time.Time{}, false, nil
		}
		f, ok := raw.(float64)
		if !ok {
			return time.Time{}, false, fmt.Errorf("%w: %s is not a number", errJWT, k)
		}
		if !(f >= 0 && f <= maxJWTTime) {
			return time.Time{}, false, fmt.Errorf("%w: %s is out of range", errJWT, k)
		}
		return time.Unix(int64(f), 0), true, nil
	}
	exp, ok, err := num("exp")
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: exp is required", errJWT)
	}
	if now.After(exp.Add(v.Leeway)) {
		return fmt.Errorf("%w: expired", errJWT)
	}
	if exp.After(now.Add(MaxJWTLifetime + v.Leeway)) {
		return fmt.Errorf("%w: exp is more than %s ahead", errJWT, MaxJWTLifetime)
	}
	if nbf, ok, err := num("nbf"); err != nil {
		return err
	} else if ok && now.Add(v.Leeway).Before(nbf) {
		return fmt.Errorf("%w: not valid yet", errJWT)
	}
	if iat, ok, err := num("iat"); err != nil {
		return err
	} else if ok && now.Add(v.Leeway).Before(iat) {
		return fmt.Errorf("%w: issued in the future", errJWT)
	}
	if v.Issuer != "" && c["iss"] != v.Issuer {
		return fmt.Errorf("%w: issuer", errJWT)
	}
	if v.Audience != "" && !hasAudience(c["aud"], v.Audience) {
		return fmt.Errorf("%w: audience", errJWT)
	}
	return nil
}

func hasAudience(aud any, want string) bool {
	switch a := aud.(type) {
	case string:
		return a == want
	case []any:
		for _, x := range a {
			if x == want {
				return true
			}
		}
	}
	return false
}
