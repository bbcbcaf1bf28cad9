package cursor

import (
	"crypto/hmac"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// TopicID is a Kafka topic ID (a UUID assigned by the broker at creation,
// returned by Metadata v10+). A recreated topic gets a new one.
type TopicID [16]byte

// TopicTag is the part of a TopicID a cursor carries: its first 8 bytes.
// Two topic incarnations share a tag with probability 2^-64.
type TopicTag [8]byte

// Tag returns the TopicTag of id.
func (id TopicID) Tag() TopicTag {
	var t TopicTag
	copy(t[:], id[:8])
	return t
}

// IsZero reports whether id is the zero ID (a broker without topic IDs).
func (id TopicID) IsZero() bool { return id == TopicID{} }

// PartitionOffset is one partition's frontier: the next offset to read.
// Every offset below it that the stream cares about has been delivered (and,
// for a durable subscription, acknowledged or filtered out).
type PartitionOffset struct {
	Partition int32
	Offset    int64
}

// Cursor is the decoded content of an opaque client cursor: where in which
// incarnation of a tenant topic a delivery stream stands.
type Cursor struct {
	// Topic is the tag of the topic incarnation the offsets refer to.
	Topic TopicTag
	// Partitions is the topic's partition count when the cursor was made; a
	// different count today means key placement has changed.
	Partitions int32
	// Sequence is the delivery.sequence of the last event delivered with
	// this cursor; the resumed stream continues at Sequence+1.
	Sequence uint64
	// Offsets is the frontier, sorted by partition, one entry per partition
	// the stream reads. A session-scoped stream names only its partition; a
	// stream over the whole topic names every partition.
	Offsets []PartitionOffset
}

// Offset returns the frontier of partition p and whether the cursor names p.
func (c Cursor) Offset(p int32) (int64, bool) {
	i, ok := slices.BinarySearchFunc(c.Offsets, p, func(po PartitionOffset, p int32) int {
		return int(po.Partition) - int(p)
	})
	if !ok {
		return 0, false
	}
	return c.Offsets[i].Offset, true
}

// Limits of the codec. A cursor beyond them is rejected before any work
// proportional to its size is done.
const (
	// MaxPartitions bounds both Cursor.Partitions and len(Cursor.Offsets).
	MaxPartitions = 1 << 16
	// MaxEncodedLen bounds the text form Decode accepts.
	MaxEncodedLen = 2 + (headerLen+3*binary.MaxVarintLen64+MaxPartitions*(2*binary.MaxVarintLen64)+macLen)*4/3
)

const (
	version1     = 1
	tenantTagLen = 4
	macLen       = 16
	// headerLen: key id, flags, tenant tag, topic tag (after the version
	// byte and the total-length varint).
	headerLen = 2 + tenantTagLen + 8

	flagDense  = 1 << 0 // Offsets covers partitions 0..Partitions-1: no partition numbers
	flagsKnown = flagDense
)

var b64 = base64.RawURLEncoding.Strict() // strict: one text form per cursor

// Encode signs c for tenant with the signing key and returns its text form:
// base64url without padding, safe in URLs, HTTP headers and SSE id: lines.
// c.Offsets must be sorted by partition without duplicates, with partitions
// in [0, c.Partitions) and offsets >= 0.
func (kr *Keyring) Encode(tenant string, c Cursor) (string, error) {
	if err := c.validate(); err != nil {
		return "", err
	}
	ks := kr.set()
	body := appendBody(make([]byte, 0, headerLen+16+len(c.Offsets)*6), ks.signID, tenantTag(tenant), &c)
	total := frameLen(len(body))
	buf := make([]byte, 0, total)
	buf = append(buf, version1)
	buf = binary.AppendUvarint(buf, uint64(total))
	buf = append(buf, body...)
	buf, err := ks.mac(buf, ks.signID, tenant, buf)
	if err != nil {
		return "", err
	}
	return b64.EncodeToString(buf), nil
}

func (c Cursor) validate() error {
	if c.Partitions <= 0 || c.Partitions > MaxPartitions {
		return fmt.Errorf("cursor: partition count %d out of range", c.Partitions)
	}
	prev := int32(-1)
	for _, po := range c.Offsets {
		if po.Partition <= prev || po.Partition >= c.Partitions {
			return fmt.Errorf("cursor: partition %d unsorted, repeated or out of range", po.Partition)
		}
		if po.Offset < 0 {
			return fmt.Errorf("cursor: negative offset %d for partition %d", po.Offset, po.Partition)
		}
		prev = po.Partition
	}
	return nil
}

func (c Cursor) dense() bool {
	return len(c.Offsets) == int(c.Partitions) // sorted, unique, in range: so 0..n-1
}

// frameLen is the length of a cursor whose body is bodyLen bytes long:
// version, the total length itself as a varint, body and MAC.
func frameLen(bodyLen int) int {
	base := 1 + bodyLen + macLen
	total := base + 1
	for total != base+uvarintLen(uint64(total)) {
		total = base + uvarintLen(uint64(total))
	}
	return total
}

// appendBody appends the signed body of c: key id, flags, tenant tag, topic
// tag, partition count, sequence and offsets.
func appendBody(buf []byte, keyID uint8, tt [tenantTagLen]byte, c *Cursor) []byte {
	var flags byte
	if c.dense() {
		flags |= flagDense
	}
	buf = append(buf, keyID, flags)
	buf = append(buf, tt[:]...)
	buf = append(buf, c.Topic[:]...)
	buf = binary.AppendUvarint(buf, uint64(c.Partitions))
	buf = binary.AppendUvarint(buf, c.Sequence)
	if flags&flagDense == 0 {
		buf = binary.AppendUvarint(buf, uint64(len(c.Offsets)))
	}
	prevP, prevO := int32(-1), int64(0)
	for i, po := range c.Offsets {
		if flags&flagDense == 0 {
			buf = binary.AppendUvarint(buf, uint64(po.Partition-prevP-1))
		}
		if i == 0 {
			buf = binary.AppendUvarint(buf, uint64(po.Offset))
		} else {
			buf = binary.AppendVarint(buf, po.Offset-prevO)
		}
		prevP, prevO = po.Partition, po.Offset
	}
	return buf
}

// Decode verifies and decodes a cursor presented by a client of tenant.
// Errors wrap ErrMalformed, ErrTruncated, ErrVersion, ErrUnknownKey,
// ErrForeignTenant or ErrForged (and are *Error with a stable Code). Decode
// never panics, whatever s holds.
func (kr *Keyring) Decode(tenant, s string) (Cursor, error) {
	if len(s) == 0 {
		return Cursor{}, errf(ErrMalformed, "empty")
	}
	if len(s) > MaxEncodedLen {
		return Cursor{}, errf(ErrMalformed, "%d characters, limit %d", len(s), MaxEncodedLen)
	}
	if strings.ContainsAny(s, "\r\n") { // the decoder would skip them
		return Cursor{}, errf(ErrMalformed, "line break")
	}
	raw, err := b64.DecodeString(s)
	if err != nil {
		return Cursor{}, errf(ErrMalformed, "not base64url: %v", err)
	}
	if len(raw) == 0 {
		return Cursor{}, errf(ErrMalformed, "empty")
	}
	if raw[0] != version1 {
		return Cursor{}, errf(ErrVersion, "version %d", raw[0])
	}
	total, w := binary.Uvarint(raw[1:])
	switch {
	case w == 0:
		return Cursor{}, errf(ErrTruncated, "%d bytes", len(raw))
	case w < 0 || total > MaxEncodedLen:
		return Cursor{}, errf(ErrMalformed, "bad length")
	case uint64(len(raw)) < total:
		return Cursor{}, errf(ErrTruncated, "%d of %d bytes", len(raw), total)
	case uint64(len(raw)) > total:
		return Cursor{}, errf(ErrMalformed, "%d trailing bytes", uint64(len(raw))-total)
	}
	start := 1 + w
	if len(raw) < start+headerLen+2+macLen { // 2: partition count and sequence
		return Cursor{}, errf(ErrMalformed, "declared length %d below the minimum", total)
	}
	c, n, err := parseBody(raw[:len(raw)-macLen], start)
	if err != nil {
		return Cursor{}, err
	}
	if n != len(raw)-macLen {
		return Cursor{}, errf(ErrMalformed, "%d stray bytes", len(raw)-macLen-n)
	}
	keyID := raw[start]
	ks := kr.set()
	if ks.keys[keyID] == nil {
		return Cursor{}, errf(ErrUnknownKey, "key id %d", keyID)
	}
	var macBuf [macLen]byte
	want, _ := ks.mac(macBuf[:0], keyID, tenant, raw[:n])
	if !hmac.Equal(want, raw[n:]) {
		if tt := tenantTag(tenant); !hmac.Equal(tt[:], raw[start+2:start+2+tenantTagLen]) {
			return Cursor{}, errf(ErrForeignTenant, "")
		}
		return Cursor{}, errf(ErrForged, "")
	}
	return c, nil
}

// parseBody reads the body (raw without its MAC) from start, the key id
// byte, and returns where it stopped. The declared total length has already
// told truncation apart; nothing parsed is trusted until the MAC is checked.
func parseBody(raw []byte, start int) (Cursor, int, error) {
	var c Cursor
	if len(raw) < start+headerLen {
		return c, 0, errf(ErrMalformed, "%d bytes", len(raw))
	}
	flags := raw[start+1]
	if flags&^flagsKnown != 0 {
		return c, 0, errf(ErrMalformed, "unknown flags %#x", flags)
	}
	copy(c.Topic[:], raw[start+2+tenantTagLen:start+headerLen])
	r := reader{b: raw, off: start + headerLen}
	parts := r.uvarint()
	c.Sequence = r.uvarint()
	if r.err != nil {
		return c, 0, r.err
	}
	if parts == 0 || parts > MaxPartitions {
		return c, 0, errf(ErrMalformed, "partition count %d", parts)
	}
	c.Partitions = int32(parts)
	n := parts
	if flags&flagDense == 0 {
		if n = r.uvarint(); r.err != nil {
			return c, 0, r.err
		}
		if n > parts {
			return c, 0, errf(ErrMalformed, "%d offsets for %d partitions", n, parts)
		}
	}
	// Each entry takes at least one byte: refuse counts the input cannot hold.
	if n > uint64(len(raw)-r.off) {
		return c, 0, errf(ErrMalformed, "%d offsets announced, %d bytes left", n, len(raw)-r.off)
	}
	c.Offsets = make([]PartitionOffset, 0, n)
	p, off := int64(-1), int64(0)
	for i := uint64(0); i < n; i++ {
		if flags&flagDense == 0 {
			p += int64(r.uvarint()) + 1
		} else {
			p++
		}
		if i == 0 {
			u := r.uvarint()
			off = int64(u)
			if u > 1<<62 {
				off = -1
			}
		} else {
			off += r.varint()
		}
		if r.err != nil {
			return c, 0, r.err
		}
		if p < 0 || p >= int64(parts) || off < 0 || off > 1<<62 {
			return c, 0, errf(ErrMalformed, "entry %d out of range", i)
		}
		c.Offsets = append(c.Offsets, PartitionOffset{Partition: int32(p), Offset: off})
	}
	return c, r.off, nil
}

type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	r.advance(n)
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if r.advance(n) && (v > 1<<62 || v < -(1<<62)) {
		r.err = errf(ErrMalformed, "offset delta out of range at byte %d", r.off)
	}
	return v
}

// advance moves past a varint of n bytes as binary.(U)varint reports it,
// recording a short or overflowing varint; it reports whether it moved.
func (r *reader) advance(n int) bool {
	switch {
	case n == 0:
		r.err = errf(ErrMalformed, "short varint at byte %d", r.off)
	case n < 0:
		r.err = errf(ErrMalformed, "varint overflow at byte %d", r.off)
	default:
		r.off += n
		return true
	}
	return false
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
