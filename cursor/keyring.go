package cursor

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sync"
	"sync/atomic"
)

// MinSecretLen is the shortest secret a Key accepts (128 bits).
const MinSecretLen = 16

// Key is one server secret used to sign cursors. ID travels inside every
// cursor so that a verifier picks the right secret; IDs are small integers
// chosen by the operator (for example, the rotation generation).
type Key struct {
	ID     uint8
	Secret []byte
}

// Keyring signs cursors with one key and verifies them with any of several,
// which is how keys rotate: add the new key as a verifier on every node,
// then make it the signer, then drop the old one once the longest-lived
// cursor signed by it no longer matters.
//
// A Keyring is safe for concurrent use. Its keys change only by Replace,
// which swaps them all at once (a reloaded key file).
type Keyring struct {
	cur atomic.Pointer[keySet]
}

// keySet is a Keyring's keys at one time; it is immutable.
type keySet struct {
	signID uint8
	keys   map[uint8]*macKey
}

func (kr *Keyring) set() *keySet { return kr.cur.Load() }

// Replace swaps in other's keys: cursors are signed with its signing key
// from now on and verified by its keys only. An Encoder made before keeps
// signing with the key it was made with (keep that key among the verifying
// ones for as long as its cursors matter: the documented rotation).
func (kr *Keyring) Replace(other *Keyring) { kr.cur.Store(other.set()) }

type macKey struct {
	pool sync.Pool // of hash.Hash (HMAC-SHA256 keyed with the secret)
}

func newMACKey(secret []byte) *macKey {
	s := append([]byte(nil), secret...)
	return &macKey{pool: sync.Pool{New: func() any { return hmac.New(sha256.New, s) }}}
}

// NewKeyring returns a Keyring that signs with signing and accepts cursors
// signed by signing or by any of verifying. Two keys sharing an ID must carry
// the same secret.
func NewKeyring(signing Key, verifying ...Key) (*Keyring, error) {
	ks := &keySet{signID: signing.ID, keys: make(map[uint8]*macKey, 1+len(verifying))}
	secrets := map[uint8][]byte{}
	for _, k := range append([]Key{signing}, verifying...) {
		if len(k.Secret) < MinSecretLen {
			return nil, fmt.Errorf("cursor: key %d: secret shorter than %d bytes", k.ID, MinSecretLen)
		}
		if prev, ok := secrets[k.ID]; ok {
			if !hmac.Equal(prev, k.Secret) {
				return nil, fmt.Errorf("cursor: key id %d given twice with different secrets", k.ID)
			}
			continue
		}
		secrets[k.ID] = k.Secret
		ks.keys[k.ID] = newMACKey(k.Secret)
	}
	kr := &Keyring{}
	kr.cur.Store(ks)
	return kr, nil
}

// SigningKeyID is the ID of the key new cursors are signed with.
func (kr *Keyring) SigningKeyID() uint8 { return kr.set().signID }

var errNoKey = errors.New("cursor: no such key")

// mac computes the truncated HMAC-SHA256 of body bound to tenant, appending
// macLen bytes to dst.
func (ks *keySet) mac(dst []byte, keyID uint8, tenant string, body []byte) ([]byte, error) {
	k := ks.keys[keyID]
	if k == nil {
		return dst, errNoKey
	}
	h := k.pool.Get().(hash.Hash)
	h.Reset()
	var prefix [64]byte
	h.Write(appendMACPrefix(prefix[:0], tenant))
	h.Write(body)
	var sum [sha256.Size]byte
	out := h.Sum(sum[:0])
	k.pool.Put(h)
	return append(dst, out[:macLen]...), nil
}

// appendMACPrefix appends what a cursor MAC covers before the cursor's
// bytes: the domain, then the tenant's length and name.
func appendMACPrefix(dst []byte, tenant string) []byte {
	dst = append(dst, macDomain...)
	dst = binary.AppendUvarint(dst, uint64(len(tenant)))
	return append(dst, tenant...)
}

// macDomain separates cursor MACs from anything else signed with the same
// secret.
const macDomain = "aep-gateway/cursor\x00"

// tenantTag is a short public hash of the tenant carried in clear in every
// cursor. It is not what makes a cursor tenant-bound (the MAC covers the full
// tenant name); it only lets Decode tell "another tenant's cursor" apart from
// "forged bytes" in its error.
func tenantTag(tenant string) [tenantTagLen]byte {
	sum := sha256.Sum256([]byte("aep-gateway/tenant\x00" + tenant))
	var t [tenantTagLen]byte
	copy(t[:], sum[:])
	return t
}
