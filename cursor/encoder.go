package cursor

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
)

// Encoder signs cursors of one tenant with its Keyring's signing key,
// reusing one HMAC state and its scratch buffers: once warmed up, Append
// allocates nothing (Keyring.Encode allocates several times per cursor).
// The text it produces is exactly Keyring.Encode's.
//
// An Encoder is not safe for concurrent use: a delivery stream owns one.
type Encoder struct {
	keyID  uint8
	tt     [tenantTagLen]byte
	h      hash.Hash
	prefix []byte // what the MAC covers before the cursor: domain, tenant
	raw    []byte // version, length, body, MAC of the last cursor
	sum    [sha256.Size]byte
}

// NewEncoder returns an Encoder signing cursors of tenant.
func (kr *Keyring) NewEncoder(tenant string) *Encoder {
	ks := kr.set()
	e := &Encoder{keyID: ks.signID, tt: tenantTag(tenant), raw: make([]byte, 0, 128)}
	e.h = ks.keys[ks.signID].pool.Get().(hash.Hash) // kept: this Encoder owns it from now on
	e.prefix = appendMACPrefix(make([]byte, 0, len(macDomain)+binary.MaxVarintLen64+len(tenant)), tenant)
	return e
}

// Append appends the text form of c, as Keyring.Encode returns it, to dst.
// c is read, not kept. The same rules on c apply as for Encode.
func (e *Encoder) Append(dst []byte, c *Cursor) ([]byte, error) {
	if err := c.validate(); err != nil {
		return dst, err
	}
	// The body goes at a fixed place after the widest length varint, then
	// moves back once its length, and so the total, is known.
	const at = 1 + binary.MaxVarintLen64 // within the capacity NewEncoder gives
	raw := appendBody(e.raw[:at], e.keyID, e.tt, c)
	bodyLen := len(raw) - at
	total := frameLen(bodyLen)
	head := binary.AppendUvarint(append(raw[:0:at], version1), uint64(total))
	n := copy(raw[len(head):], raw[at:])
	raw = raw[:len(head)+n]

	e.h.Reset()
	e.h.Write(e.prefix)
	e.h.Write(raw)
	raw = append(raw, e.h.Sum(e.sum[:0])[:macLen]...)
	e.raw = raw
	return b64.AppendEncode(dst, raw), nil
}

// Encode returns the text form of c: Append into a string, the one
// allocation being the string.
func (e *Encoder) Encode(c *Cursor) (string, error) {
	var buf [128]byte
	out, err := e.Append(buf[:0], c)
	if err != nil {
		return "", err
	}
	return string(out), nil
}
