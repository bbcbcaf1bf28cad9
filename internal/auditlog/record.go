// Package auditlog is the format of the audit log's signed checkpoints
// (docs/audit.md): the canonical bytes of an events record, the Merkle leaf
// each record is sealed as, the signed tree head of a partition's prefix,
// the checkpoint records of the audit topic, their keys, and the checks an
// auditor runs offline (Verify, Proof.Check). It does no I/O.
package auditlog

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"

	"github.com/aep-gateway/aep-gateway/internal/merkle"
)

// Record is what is sealed of one events record: everything Kafka keeps of
// it but its position, which the leaf adds.
type Record struct {
	Key, Value  []byte
	Headers     []Header
	TimestampMs int64
}

// Header is one Kafka record header.
type Header struct{ Key, Value []byte }

const contentDomain = "aep-audit-record/v1\x00"

// ContentHash is the SHA-256 of the record's canonical bytes: the domain
// string, then the key, the value, the number of headers and each header's
// key and value, every one prefixed by its length as 8 big-endian bytes,
// then the timestamp in milliseconds as 8 big-endian bytes.
func ContentHash(r Record) merkle.Hash {
	h := sha256.New()
	h.Write([]byte(contentDomain))
	writeBytes(h, r.Key)
	writeBytes(h, r.Value)
	writeUint(h, uint64(len(r.Headers)))
	for _, hd := range r.Headers {
		writeBytes(h, hd.Key)
		writeBytes(h, hd.Value)
	}
	writeUint(h, uint64(r.TimestampMs))
	var out merkle.Hash
	h.Sum(out[:0])
	return out
}

func writeUint(h hash.Hash, n uint64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	h.Write(b[:])
}

func writeBytes(h hash.Hash, b []byte) {
	writeUint(h, uint64(len(b)))
	h.Write(b)
}

// Leaf is the Merkle leaf hash of the record at offset whose content hash
// is content: RFC 9162's leaf hash of the offset (8 big-endian bytes)
// followed by the content hash. The offset is part of the leaf, so a record
// moved to another offset, or an offset reused, does not seal as before.
func Leaf(offset int64, content merkle.Hash) merkle.Hash {
	var b [8 + sha256.Size]byte
	binary.BigEndian.PutUint64(b[:8], uint64(offset))
	copy(b[8:], content[:])
	return merkle.LeafHash(b[:])
}
