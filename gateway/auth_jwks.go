package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// JWKS is a JSON Web Key Set (RFC 7517) that JWT verification looks keys
// up in by the token's kid. The set is replaced whole and atomically
// (Load, Reload, a URL refresh), so verification never sees half a set.
// Only public RSA (2048+ bits, RS256) and P-256 EC (ES256) keys with a
// kid are taken; other keys of a set are ignored, and a key whose "alg"
// names another algorithm is never used with it.
//
// A JWKS from a URL is fetched again every refresh interval by a goroutine
// that Close stops and waits for; a token whose kid is unknown makes it
// fetch at once, at most once per MinRefreshInterval, so a client cannot
// make the gateway hammer the key server.
type JWKS struct {
	keys atomic.Pointer[map[string]jwk]

	// Set for a URL source.
	url    string
	client *http.Client

	mu          sync.Mutex // serializes fetches
	lastFetch   time.Time  // guarded by mu
	minInterval time.Duration

	quit      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// MinRefreshInterval is the least time between two fetches of a JWKS URL
// caused by unknown kids.
const MinRefreshInterval = 10 * time.Second

// maxJWKSBytes bounds a JWKS document.
const maxJWKSBytes = 1 << 20

type jwk struct {
	rsa *rsa.PublicKey
	ec  *ecdsa.PublicKey
	alg string // the key's "alg", or "" for any that fits its type
}

// ParseJWKS builds a JWKS from a JWK Set document.
func ParseJWKS(raw []byte) (*JWKS, error) {
	keys, err := parseJWKSKeys(raw)
	if err != nil {
		return nil, err
	}
	s := &JWKS{}
	s.keys.Store(&keys)
	return s, nil
}

func parseJWKSKeys(raw []byte) (map[string]jwk, error) {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	keys := map[string]jwk{}
	for _, k := range set.Keys {
		if k.KeyID == "" || (k.Use != "" && k.Use != "sig") {
			continue
		}
		switch pub := k.Key.(type) {
		case *rsa.PublicKey:
			if pub.N.BitLen() >= 2048 && (k.Algorithm == "" || k.Algorithm == "RS256") {
				keys[k.KeyID] = jwk{rsa: pub, alg: k.Algorithm}
			}
		case *ecdsa.PublicKey:
			if pub.Curve.Params().Name == "P-256" && (k.Algorithm == "" || k.Algorithm == "ES256") {
				keys[k.KeyID] = jwk{ec: pub, alg: k.Algorithm}
			}
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("jwks: no usable key (RSA 2048+ or P-256 public keys with a kid)")
	}
	return keys, nil
}

// LoadJWKSFile reads a JWKS file.
func LoadJWKSFile(path string) (*JWKS, error) {
	raw, err := ReadFileLimited(path, maxJWKSBytes)
	if err != nil {
		return nil, fmt.Errorf("jwks file: %w", err)
	}
	s, err := ParseJWKS(raw)
	if err != nil {
		return nil, fmt.Errorf("jwks file %s: %w", path, err)
	}
	return s, nil
}

// Replace swaps in the keys of other (a freshly loaded set): tokens
// verified from now on use them.
func (s *JWKS) Replace(other *JWKS) { s.keys.Store(other.keys.Load()) }

// Len is the number of usable keys.
func (s *JWKS) Len() int { return len(s.current()) }

// current is the key map in use; a zero JWKS holds none.
func (s *JWKS) current() map[string]jwk {
	if m := s.keys.Load(); m != nil {
		return *m
	}
	return nil
}

// NewJWKSURL fetches the JWKS at url (failing if it cannot) and keeps it
// fresh: every refresh interval, and on an unknown kid (rate-limited).
// client nil means a client with a 10-second timeout. Close it when done.
func NewJWKSURL(ctx context.Context, url string, client *http.Client, refresh time.Duration) (*JWKS, error) {
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	s := &JWKS{url: url, client: client, minInterval: MinRefreshInterval, quit: make(chan struct{}), done: make(chan struct{})}
	keys, err := s.fetch(ctx)
	if err != nil {
		return nil, err
	}
	s.keys.Store(&keys)
	s.lastFetch = time.Now()
	go s.refreshLoop(refresh)
	return s, nil
}

func (s *JWKS) fetch(ctx context.Context) (map[string]jwk, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, fmt.Errorf("jwks url: %w", err)
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("jwks url: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("jwks url %s: status %d", s.url, resp.StatusCode)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("jwks url: %w", err)
	}
	if len(raw) > maxJWKSBytes {
		return nil, fmt.Errorf("jwks url %s: document over %d bytes", s.url, maxJWKSBytes)
	}
	return parseJWKSKeys(raw)
}

// Refresh fetches a URL JWKS now, unless it was fetched less than
// minInterval ago (force ignores that). A failed fetch keeps the old keys.
func (s *JWKS) Refresh(ctx context.Context, force bool) error {
	if s.url == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !force && time.Since(s.lastFetch) < s.minInterval {
		return nil
	}
	s.lastFetch = time.Now()
	keys, err := s.fetch(ctx)
	if err != nil {
		return err
	}
	s.keys.Store(&keys)
	return nil
}

func (s *JWKS) refreshLoop(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = s.Refresh(ctx, true) // on failure the old keys stay; an unknown kid retries
			cancel()
		}
	}
}

// Close stops a URL JWKS's refreshes and waits for them. Idempotent; a
// no-op for other sets.
func (s *JWKS) Close() {
	if s.quit == nil {
		return
	}
	s.closeOnce.Do(func() { close(s.quit) })
	<-s.done
}

// key returns the key named kid, refreshing a URL set once (rate-limited)
// when kid is unknown.
func (s *JWKS) key(kid string) (jwk, bool) {
	if k, ok := s.current()[kid]; ok {
		return k, true
	}
	if s.url == "" || kid == "" {
		return jwk{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s.Refresh(ctx, false) != nil {
		return jwk{}, false
	}
	k, ok := s.current()[kid]
	return k, ok
}

// NewJWTVerifierJWKS verifies RS256 and ES256 tokens with the key of set
// named by the token's kid. A token without a kid, with an unknown kid,
// or whose alg does not fit the key is refused.
func NewJWTVerifierJWKS(set *JWKS) *JWTVerifier {
	return &JWTVerifier{jwks: set, now: time.Now}
}

// ReadFileLimited reads a file of at most max bytes (credentials files).
func ReadFileLimited(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) > max {
		return nil, fmt.Errorf("%s is over %d bytes", path, max)
	}
	return raw, nil
}

// JWKS returns the key set of a verifier built by NewJWTVerifierJWKS, or
// nil for a static key.
func (v *JWTVerifier) JWKS() *JWKS { return v.jwks }
