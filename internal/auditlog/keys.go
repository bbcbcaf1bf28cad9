package auditlog

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sort"
)

// KeyID names an Ed25519 public key: the first 8 bytes of its SHA-256, in
// hex.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// Signer signs checkpoints with one Ed25519 key.
type Signer struct {
	priv ed25519.PrivateKey
	id   string
}

// NewSigner signs with priv.
func NewSigner(priv ed25519.PrivateKey) *Signer {
	return &Signer{priv: priv, id: KeyID(priv.Public().(ed25519.PublicKey))}
}

// KeyID is the id of the signer's public key.
func (s *Signer) KeyID() string { return s.id }

// Public is the signer's public key.
func (s *Signer) Public() ed25519.PublicKey { return s.priv.Public().(ed25519.PublicKey) }

// Sign signs msg. Ed25519 signatures are deterministic (RFC 8032): one
// key signs one message one way.
func (s *Signer) Sign(msg []byte) []byte { return ed25519.Sign(s.priv, msg) }

// LoadSigner reads a PEM "PRIVATE KEY" (PKCS #8) Ed25519 key, as
// `openssl genpkey -algorithm ed25519` writes it.
func LoadSigner(path string) (*Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit signing key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("audit signing key %s: want a PEM PRIVATE KEY block (openssl genpkey -algorithm ed25519)", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("audit signing key %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("audit signing key %s: %T, want an Ed25519 key", path, k)
	}
	return NewSigner(priv), nil
}

// LoadOrCreateSigner loads the key at path, or creates one there (mode
// 0600, exclusively: two processes racing keep the first) when none
// exists. For the embedded mode's data directory.
func LoadOrCreateSigner(path string) (*Signer, bool, error) {
	if s, err := LoadSigner(path); err == nil {
		return s, false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, false, err
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, false, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		s, err := LoadSigner(path)
		return s, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("audit signing key: %w", err)
	}
	if err := pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}); err != nil {
		_ = f.Close()
		return nil, false, fmt.Errorf("audit signing key: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return nil, false, fmt.Errorf("audit signing key: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, false, fmt.Errorf("audit signing key: %w", err)
	}
	return NewSigner(priv), true, nil
}

// Keys are the public keys checkpoints are verified with, by key id.
type Keys map[string]ed25519.PublicKey

// Add adds pub under its id.
func (k Keys) Add(pub ed25519.PublicKey) { k[KeyID(pub)] = pub }

// KeyDoc is one key of the published key set (GET
// /.well-known/aep-audit-keys).
type KeyDoc struct {
	KeyID     string `json:"key_id"`
	Algorithm string `json:"algorithm"`
	PublicKey string `json:"public_key"` // base64 of the 32 raw bytes
	Active    bool   `json:"active,omitempty"`
}

// KeySetDoc is the published key set.
type KeySetDoc struct {
	Keys []KeyDoc `json:"keys"`
}

// Doc is k as published; active names the key that signs now.
func (k Keys) Doc(active string) KeySetDoc {
	out := KeySetDoc{Keys: []KeyDoc{}}
	for id, pub := range k {
		out.Keys = append(out.Keys, KeyDoc{KeyID: id, Algorithm: "Ed25519",
			PublicKey: base64.StdEncoding.EncodeToString(pub), Active: id == active})
	}
	sort.Slice(out.Keys, func(i, j int) bool { return out.Keys[i].KeyID < out.Keys[j].KeyID })
	return out
}

// ParseKeys reads public keys from PEM "PUBLIC KEY" blocks (PKIX, as
// `openssl pkey -pubout` writes them) or from a published key set
// (KeySetDoc JSON).
func ParseKeys(b []byte) (Keys, error) {
	keys := Keys{}
	var doc KeySetDoc
	if err := json.Unmarshal(b, &doc); err == nil {
		for _, d := range doc.Keys {
			if d.Algorithm != "Ed25519" {
				return nil, fmt.Errorf("audit keys: key %s: algorithm %q, want Ed25519", d.KeyID, d.Algorithm)
			}
			raw, err := base64.StdEncoding.DecodeString(d.PublicKey)
			if err != nil || len(raw) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("audit keys: key %s: not a base64 Ed25519 public key", d.KeyID)
			}
			if KeyID(raw) != d.KeyID {
				return nil, fmt.Errorf("audit keys: key %s: its id is %s", d.KeyID, KeyID(raw))
			}
			keys.Add(raw)
		}
		return keys, nil
	}
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "PUBLIC KEY" {
			continue
		}
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("audit keys: %w", err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("audit keys: %T, want Ed25519", k)
		}
		keys.Add(pub)
	}
	if len(keys) == 0 {
		return nil, errors.New("audit keys: no key found (want PEM PUBLIC KEY blocks or the JSON of /.well-known/aep-audit-keys)")
	}
	return keys, nil
}

// MarshalPublicPEM is pub as a PEM "PUBLIC KEY" block.
func MarshalPublicPEM(pub ed25519.PublicKey) []byte {
	der, _ := x509.MarshalPKIXPublicKey(pub) // cannot fail for an Ed25519 key
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// TestKey is a deterministic private key from a one-byte seed, for tests.
func TestKey(seed byte) ed25519.PrivateKey {
	b := make([]byte, ed25519.SeedSize)
	b[0] = seed
	return ed25519.NewKeyFromSeed(b)
}
