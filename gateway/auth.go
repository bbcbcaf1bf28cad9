package gateway

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/principal"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// DevTenant is the tenant of every request in development mode.
const DevTenant = "default"

// KeyStore maps API keys to tenants. Only SHA-256 digests of keys are held,
// so a leaked key file does not leak keys. Replace swaps in the keys of a
// reloaded file atomically while requests are served.
type KeyStore struct {
	cur atomic.Pointer[keyMaps]
}

// keyMaps are a key file's credentials: API keys by digest, client
// certificates by subject common name.
type keyMaps struct {
	byDigest map[[32]byte]keyEntry
	byCert   map[string]keyEntry
}

// keyEntry is what a key authenticates: its tenant and its principal.
type keyEntry struct {
	tenant    string
	principal *principal.Principal
}

// Replace swaps in the keys of other (a freshly loaded file): requests
// authenticated from now on use them, and removed keys stop working.
func (ks *KeyStore) Replace(other *KeyStore) { ks.cur.Store(other.cur.Load()) }

// LoadKeyStore reads an API key file: one "<tenant> sha256:<hex digest>"
// per line, optionally followed by "principal=<id>" (default
// "key:<the digest's first 8 hex digits>") and "scopes=<scope>,<scope>"
// (package principal's vocabulary; without it the key may do everything
// its tenant may); '#' comments and blank lines ignored. Generate a digest
// with `printf %s "$KEY" | sha256sum`.
func LoadKeyStore(path string) (*KeyStore, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("api key file: %w", err)
	}
	defer f.Close()
	ks, err := ParseKeyStore(f)
	if err != nil {
		return nil, fmt.Errorf("api key file %s: %w", path, err)
	}
	return ks, nil
}

// ParseKeyStore parses the API key file format of LoadKeyStore.
func ParseKeyStore(r io.Reader) (*KeyStore, error) {
	byDigest := make(map[[32]byte]keyEntry)
	byCert := make(map[string]keyEntry)
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) < 2 {
			return nil, fmt.Errorf("line %d: want \"<tenant> sha256:<hex> [principal=<id>] [scopes=<list>]\"", line)
		}
		tenant, digest := fields[0], fields[1]
		if err := partitioning.ValidateTenant(tenant); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if cn, ok := strings.CutPrefix(digest, "cert:"); ok {
			// A client certificate (--tls-client-ca) whose subject CN is
			// cn: the principal is cn unless principal= names another.
			if err := validPrincipalID(cn); err != nil {
				return nil, fmt.Errorf("line %d: cert: %w", line, err)
			}
			p, err := keyPrincipal("", fields[2:])
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			if p.ID == "" {
				p.ID = cn
			}
			p.Method = principal.MethodMTLS
			if prev, dup := byCert[cn]; dup {
				return nil, fmt.Errorf("line %d: certificate %s already maps to tenant %s", line, aep.QuoteTrunc(cn), prev.tenant)
			}
			byCert[cn] = keyEntry{tenant: tenant, principal: p}
			continue
		}
		hexd, ok := strings.CutPrefix(digest, "sha256:")
		if !ok {
			return nil, fmt.Errorf("line %d: the digest lacks its sha256: prefix (or cert:<subject CN> for a client certificate)", line)
		}
		raw, err := hex.DecodeString(hexd)
		if err != nil || len(raw) != 32 {
			return nil, fmt.Errorf("line %d: digest must be 64 hex characters", line)
		}
		var d [32]byte
		copy(d[:], raw)
		p, err := keyPrincipal(hexd, fields[2:])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if prev, dup := byDigest[d]; dup && prev.tenant != tenant {
			return nil, fmt.Errorf("line %d: key already maps to tenant %s", line, prev.tenant)
		}
		byDigest[d] = keyEntry{tenant: tenant, principal: p}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(byDigest)+len(byCert) == 0 {
		return nil, errors.New("no keys")
	}
	ks := &KeyStore{}
	ks.cur.Store(&keyMaps{byDigest: byDigest, byCert: byCert})
	return ks, nil
}

// keyPrincipal is the principal of a key line's options.
func keyPrincipal(hexDigest string, opts []string) (*principal.Principal, error) {
	p := &principal.Principal{Method: principal.MethodAPIKey}
	if hexDigest != "" {
		p.ID = "key:" + strings.ToLower(hexDigest[:8])
	}
	for _, o := range opts {
		k, v, ok := strings.Cut(o, "=")
		switch {
		case !ok:
			return nil, fmt.Errorf("%q: want principal=<id> or scopes=<list>", o)
		case k == "principal":
			if err := validPrincipalID(v); err != nil {
				return nil, err
			}
			p.ID = v
		case k == "scopes":
			s, err := principal.ParseScopes(v)
			if err != nil {
				return nil, err
			}
			p.Scopes = s
		default:
			return nil, fmt.Errorf("unknown option %q (principal, scopes)", k)
		}
	}
	return p, nil
}

// maxPrincipalID bounds a principal's id: records carry it in a header.
const maxPrincipalID = 256

// validPrincipalID refuses ids a header or a log line should not carry.
func validPrincipalID(id string) error {
	if id == "" || len(id) > maxPrincipalID {
		return fmt.Errorf("principal id must be 1 to %d bytes", maxPrincipalID)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("principal id %s: printable ASCII without spaces only", aep.QuoteTrunc(id))
		}
	}
	return nil
}

// Tenant returns the tenant of key. Lookup is by SHA-256 digest, so its
// timing reveals nothing usable about stored keys.
func (ks *KeyStore) Tenant(key string) (string, bool) {
	e, ok := ks.lookup(key)
	return e.tenant, ok
}

// lookup is the entry of key.
func (ks *KeyStore) lookup(key string) (keyEntry, bool) {
	if key == "" {
		return keyEntry{}, false
	}
	e, ok := ks.maps().byDigest[sha256.Sum256([]byte(key))]
	return e, ok
}

// lookupCert is the entry of a verified client certificate's subject CN.
func (ks *KeyStore) lookupCert(cn string) (keyEntry, bool) {
	e, ok := ks.maps().byCert[cn]
	return e, ok
}

// Len is the number of keys and certificates held.
func (ks *KeyStore) Len() int {
	m := ks.maps()
	return len(m.byDigest) + len(m.byCert)
}

// maps are the credentials in use; a zero KeyStore holds none.
func (ks *KeyStore) maps() *keyMaps {
	if m := ks.cur.Load(); m != nil {
		return m
	}
	return &keyMaps{}
}

// TenantFrom returns the name of the authenticated tenant of a request's
// context ("" when none); tenant.FromContext returns the Tenant itself.
func TenantFrom(ctx context.Context) string {
	t, _ := tenant.FromContext(ctx)
	return t.String()
}

// bearerToken returns the request's token: the Authorization bearer, or the
// access_token query parameter that EventSource clients use (AEP-0003 §8.1),
// on the streaming GET routes only (queryTokenAllowed).
// The query form is never logged: the access log strips the query string.
// The scheme is case-insensitive (RFC 7235 §2.1).
func bearerToken(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return ""
		}
		return strings.TrimSpace(tok)
	}
	if !queryTokenAllowed(r) {
		return ""
	}
	return r.URL.Query().Get("access_token")
}

// Authenticator maps bearer tokens to tenants: API keys, JWTs, or both.
// The zero value (no keys, no JWT) is development mode: every request is
// DevTenant.
type Authenticator struct {
	Keys *KeyStore
	JWT  *JWTVerifier
	// Log receives one debug line per refused credential with the reason
	// (never the token); the zero Logger discards them.
	Log zerolog.Logger
}

// Dev reports whether the authenticator accepts every request unauthenticated.
func (a Authenticator) Dev() bool { return a.Keys == nil && a.JWT == nil }

// Tenant returns the tenant of a bearer token. A token of JWT shape is
// checked as a JWT when a verifier is configured, otherwise as an API key.
func (a Authenticator) Tenant(tok string) (string, bool) {
	t, _, _, err := a.resolve(tok)
	return t, err == nil
}

// Credential kinds, as refusals are logged.
const (
	credNone   = "none"
	credJWT    = "jwt"
	credAPIKey = "api_key"
	credMTLS   = "mtls"
)

var (
	errNoCredential = errors.New("no bearer token")
	errUnknownKey   = errors.New("unknown API key")
	errUnknownCert  = errors.New("client certificate verified, but no cert: line names its subject CN")
)

// resolveRequest is resolve of the request's bearer token or, when it
// has none, of its verified client certificate (TLS with --tls-client-ca):
// the key file's "cert:<subject CN>" line names its tenant and principal.
// A bearer token, when present, is the credential.
func (a Authenticator) resolveRequest(r *http.Request) (tenant, kind string, p *principal.Principal, err error) {
	tok := bearerToken(r)
	if tok == "" && !a.Dev() && a.Keys != nil && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		cn := r.TLS.VerifiedChains[0][0].Subject.CommonName
		if e, ok := a.Keys.lookupCert(cn); ok {
			return e.tenant, credMTLS, e.principal, nil
		}
		return "", credMTLS, nil, errUnknownCert
	}
	return a.resolve(tok)
}

// resolve is Tenant with the kind of credential, the principal it names
// (nil in development mode) and, when it is refused, why.
func (a Authenticator) resolve(tok string) (tenant, kind string, p *principal.Principal, err error) {
	switch {
	case a.Dev():
		return DevTenant, credNone, nil, nil
	case tok == "":
		return "", credNone, nil, errNoCredential
	case a.JWT != nil && looksLikeJWT(tok):
		t, p, err := a.JWT.Principal(tok)
		return t, credJWT, p, err
	case a.Keys != nil:
		if e, ok := a.Keys.lookup(tok); ok {
			return e.tenant, credAPIKey, e.principal, nil
		}
	}
	return "", credAPIKey, nil, errUnknownKey
}

// authenticate resolves the tenant of each request through auth.
// Unauthenticated requests get 401 in dialect d (the route's); a request
// with more than one Authorization header gets 400, whichever is valid, as
// the first no longer silently wins.
func authenticate(auth Authenticator, d aep.Dialect) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if len(r.Header.Values("Authorization")) > 1 {
				refuseCredential(w, d, http.StatusBadRequest, "more than one Authorization header: send exactly one")
				return
			}
			name, kind, p, err := auth.resolveRequest(r)
			var t tenant.Tenant
			if err == nil {
				// The one validation of the tenant name: everything below
				// takes the Tenant as it is.
				t, err = tenant.Parse(name)
				t = t.WithPrincipal(p)
			}
			if err != nil {
				auth.Log.Debug().Str("request_id", RequestIDFrom(r.Context())).Str("credential", kind).
					Str("reason", err.Error()).Str("path", r.URL.Path).Msg("credential refused")
				unauthorized(w, d)
				return
			}
			noteTenant(r.Context(), name) // for the access log, which runs outside
			next.ServeHTTP(w, r.WithContext(tenant.NewContext(r.Context(), t)))
		})
	}
}

// unauthorized answers a request without a valid credential: 401 in
// dialect d, with the challenge.
func unauthorized(w http.ResponseWriter, d aep.Dialect) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="aep-gateway"`)
	refuseCredential(w, d, http.StatusUnauthorized, "a valid bearer token is required")
}

// refuseCredential answers a credential problem with status, in dialect
// d's error shape and its unauthorized code.
func refuseCredential(w http.ResponseWriter, d aep.Dialect, status int, msg string) {
	if d == aep.DialectD {
		writeD(w, status, aep.CodeDUnauthorized, msg, false)
		return
	}
	writeR(w, status, aep.CodeRUnauthorized, msg)
}
