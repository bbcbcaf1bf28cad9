// Package auditlog is the format of the audit log's signed checkpoints
// (docs/audit.md): the canonical bytes of an events record, the Merkle leaf
// each record is sealed as, the signed tree head of a partition's prefix,
// the checkpoint records of the audit topic, their keys, and the checks an
// auditor runs offline (Verify, Proof.Check). It does no I/O.
package auditlog

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"

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
	bp := canonPool.Get().(*[]byte)
	b := append((*bp)[:0], contentDomain...)
	b = appendBytes(b, r.Key)
	b = appendBytes(b, r.Value)
	b = binary.BigEndian.AppendUint64(b, uint64(len(r.Headers)))
	for _, hd := range r.Headers {
		b = appendBytes(b, hd.Key)
		b = appendBytes(b, hd.Value)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(r.TimestampMs))
	sum := sha256.Sum256(b)
	if cap(b) <= 1<<20 { // a huge record's buffer is not kept
		*bp = b
		canonPool.Put(bp)
	}
	return sum
}

// canonPool holds the buffers ContentHash writes the canonical bytes to.
var canonPool = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

func appendBytes(b, v []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(v)))
	return append(b, v...)
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
