package cursor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A resolve scan reads thousands of other sessions' records to find one
// session's event: decoding each into its own kgo.Record (a Record, a
// headers slice, a string per header key) was most of a resume's
// allocations and the part of its cost that grew with how far the
// position lies from its checkpoint. batchReader walks the fetched record
// batches in place instead: one reused Record whose Key, Value and header
// values point into the (decompressed) batch, header keys interned per
// scan. It reads only what it can read exactly like
// kgo.ProcessFetchPartition would; anything else (a partition error,
// aborted transactions, transactional or control batches, the old message
// formats) is left to ProcessFetchPartition.

// Record batch v2 layout (KIP-98): the byte offsets of the fields read.
const (
	batchLengthAt     = 8  // int32, counts the bytes after it
	batchMagicAt      = 16 // int8
	batchCRCAt        = 17 // uint32, CRC-32C of everything from attributes on
	batchAttrsAt      = 21 // int16
	batchLastDeltaAt  = 23 // int32
	batchFirstTSAt    = 27 // int64
	batchCountAt      = 57 // int32
	batchRecordsAt    = 61 // the records (compressed as a whole when attributes say so)
	batchAttrCodec    = 0x07
	batchAttrTxn      = 0x10
	batchAttrControl  = 0x20
	maxInternedKeys   = 32
	batchHeaderLength = batchRecordsAt
)

var (
	crc32c        = crc32.MakeTable(crc32.Castagnoli)
	errBadRecords = errors.New("cursor: malformed record batch")
)

// plainBatches reports whether every complete batch of rp is a v2 record
// batch that is neither transactional nor control, with a valid CRC, and
// rp has no error and no aborted transactions: what batchReader reads.
func plainBatches(rp *kmsg.FetchResponseTopicPartition) bool {
	if rp.ErrorCode != 0 || len(rp.AbortedTransactions) > 0 {
		return false
	}
	in := rp.RecordBatches
	for {
		b, rest, ok := nextBatch(in)
		if !ok {
			return true
		}
		if b[batchMagicAt] != 2 {
			return false
		}
		attrs := binary.BigEndian.Uint16(b[batchAttrsAt:])
		if attrs&(batchAttrTxn|batchAttrControl) != 0 {
			return false
		}
		if crc32.Checksum(b[batchAttrsAt:], crc32c) != binary.BigEndian.Uint32(b[batchCRCAt:]) {
			return false // ProcessFetchPartition reports it
		}
		in = rest
	}
}

// nextBatch splits the first complete batch off in; ok is false when in
// holds no complete batch (the broker may end a response mid-batch).
func nextBatch(in []byte) (batch, rest []byte, ok bool) {
	if len(in) < batchHeaderLength {
		return nil, nil, false
	}
	n := int64(int32(binary.BigEndian.Uint32(in[batchLengthAt:]))) + 12
	if n < batchHeaderLength || int64(len(in)) < n {
		return nil, nil, false
	}
	return in[:n], in[n:], true
}

// batchReader decodes the records of plain batches (see plainBatches).
type batchReader struct {
	decomp kgo.Decompressor
	rec    kgo.Record
	keys   []string // header keys seen in this scan, so each is allocated once
}

// each calls fn on every record of rp's complete batches with an offset at
// or above from, in order, until fn returns false (stopped). The record is
// valid only during fn. next is the offset after the last complete batch
// (from when there is none).
func (br *batchReader) each(topic string, rp *kmsg.FetchResponseTopicPartition, from int64, fn func(*kgo.Record) bool) (next int64, stopped bool, err error) {
	next = from
	in := rp.RecordBatches
	for {
		b, rest, ok := nextBatch(in)
		if !ok {
			return next, false, nil
		}
		in = rest
		base := int64(binary.BigEndian.Uint64(b))
		last := base + int64(int32(binary.BigEndian.Uint32(b[batchLastDeltaAt:])))
		if last < from {
			continue
		}
		next = max(next, last+1)
		records := b[batchRecordsAt:]
		if codec := byte(binary.BigEndian.Uint16(b[batchAttrsAt:]) & batchAttrCodec); codec != 0 {
			if records, err = br.decomp.Decompress(records, kgo.CompressionCodecType(codec)); err != nil {
				return next, false, fmt.Errorf("cursor: decompress batch at %s/%d@%d: %w", topic, rp.Partition, base, err)
			}
		}
		firstTS := int64(binary.BigEndian.Uint64(b[batchFirstTSAt:]))
		count := int32(binary.BigEndian.Uint32(b[batchCountAt:]))
		for i := int32(0); i < count; i++ {
			if records, err = br.record(records, base, firstTS); err != nil {
				return next, false, fmt.Errorf("%w at %s/%d@%d", err, topic, rp.Partition, base)
			}
			if br.rec.Offset < from {
				continue
			}
			br.rec.Topic, br.rec.Partition = topic, rp.Partition
			if !fn(&br.rec) {
				return next, true, nil
			}
		}
	}
}

// record decodes the record at the head of in into br.rec and returns the
// rest of in.
func (br *batchReader) record(in []byte, base, firstTS int64) ([]byte, error) {
	length, n := kbin.Varint(in)
	if n <= 0 || length < 0 || int64(len(in)-n) < int64(length) {
		return nil, errBadRecords
	}
	body, rest := in[n:n+int(length)], in[n+int(length):]
	if len(body) < 1 {
		return nil, errBadRecords
	}
	body = body[1:] // attributes: unused in v2 records
	d := decoder{b: body}
	tsDelta := d.varlong()
	offDelta := d.varint()
	key := d.bytes()
	value := d.bytes()
	nh := d.varint()
	if d.bad || nh < 0 || int(nh) > len(d.b) {
		return nil, errBadRecords
	}
	r := &br.rec
	r.Offset = base + int64(offDelta)
	r.Timestamp = time.UnixMilli(firstTS + tsDelta)
	r.Key, r.Value = key, value
	r.Headers = r.Headers[:0]
	for range nh {
		k := d.bytes()
		v := d.bytes()
		if d.bad {
			return nil, errBadRecords
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: br.intern(k), Value: v})
	}
	return rest, nil
}

// intern returns k as a string, allocating it only the first time this
// scan sees it (up to maxInternedKeys distinct keys).
func (br *batchReader) intern(k []byte) string {
	for _, s := range br.keys {
		if s == string(k) {
			return s
		}
	}
	s := string(k)
	if len(br.keys) < maxInternedKeys {
		br.keys = append(br.keys, s)
	}
	return s
}

// decoder reads the zig-zag varints and length-prefixed byte strings of a
// v2 record; bad is set (and stays set) on the first malformed field.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) varint() int32 {
	v, n := kbin.Varint(d.b)
	if n <= 0 {
		d.bad, d.b = true, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varlong() int64 {
	v, n := kbin.Varlong(d.b)
	if n <= 0 {
		d.bad, d.b = true, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes reads a length-prefixed string; length -1 is nil.
func (d *decoder) bytes() []byte {
	n := d.varint()
	switch {
	case d.bad:
		return nil
	case n == -1:
		return nil
	case n < -1 || int(n) > len(d.b):
		d.bad, d.b = true, nil
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}
