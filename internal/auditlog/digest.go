package auditlog

import (
	"encoding/hex"
	"fmt"

	"github.com/aep-gateway/aep-gateway/internal/merkle"
)

// Digest is a SHA-256 value as checkpoints and proofs carry it: hex in
// JSON.
type Digest merkle.Hash

// MarshalText is the lowercase hex.
func (d Digest) MarshalText() ([]byte, error) {
	out := make([]byte, hex.EncodedLen(len(d)))
	hex.Encode(out, d[:])
	return out, nil
}

// UnmarshalText reads 64 hex digits.
func (d *Digest) UnmarshalText(b []byte) error {
	if hex.DecodedLen(len(b)) != len(d) {
		return fmt.Errorf("auditlog: digest: %d hex digits, want %d", len(b), 2*len(d))
	}
	_, err := hex.Decode(d[:], b)
	return err
}

func digests(hs []merkle.Hash) []Digest {
	out := make([]Digest, len(hs))
	for i, h := range hs {
		out[i] = Digest(h)
	}
	return out
}

func hashes(ds []Digest) []merkle.Hash {
	out := make([]merkle.Hash, len(ds))
	for i, d := range ds {
		out[i] = merkle.Hash(d)
	}
	return out
}
