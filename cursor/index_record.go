package cursor

import (
	"encoding/binary"
	"errors"
)

// The resume index lives in a compacted topic (name chosen by the caller,
// for example aep.<tenant>.index). Two record kinds, told by the key's first
// byte; values start with a format version. docs/cursors.md documents the
// bytes for people reading the topic directly.
//
//	checkpoint  key   'c' topicTag[8] uvarint(len(session)) session be64(offset)
//	            value 1 uvarint(partition) uvarint(partitions) uvarint(offset)
//	                    uvarint(epoch) uvarint(seq) uvarint(distance)
//	marker      key   'm' topicTag[8] be32(partition)
//	            value 1 uvarint(partitions) uvarint(indexed)
//
// A checkpoint says: the session's event at offset has position
// (epoch, seq), and the session's next events up to the next checkpoint all
// lie below offset+distance. A marker says: every event of the partition
// below indexed has been indexed, and the checkpoints for them precede this
// marker in the index partition.

const indexFormat = 1

type layout struct {
	tag        TopicTag
	partitions int32
	partition  int32
}

type checkpoint struct {
	offset   int64
	epoch    int64
	seq      int64
	distance int64
}

func (c checkpoint) pos() Position { return Position{Epoch: c.epoch, Seq: c.seq} }

var errIndexRecord = errors.New("cursor: malformed index record")

func checkpointKey(tag TopicTag, session string, offset int64) []byte {
	k := make([]byte, 0, 1+8+2+len(session)+8)
	k = append(k, 'c')
	k = append(k, tag[:]...)
	k = binary.AppendUvarint(k, uint64(len(session)))
	k = append(k, session...)
	return binary.BigEndian.AppendUint64(k, uint64(offset))
}

func checkpointValue(l layout, c checkpoint) []byte {
	v := make([]byte, 0, 24)
	v = append(v, indexFormat)
	for _, x := range []uint64{uint64(l.partition), uint64(l.partitions), uint64(c.offset), uint64(c.epoch), uint64(c.seq), uint64(c.distance)} {
		v = binary.AppendUvarint(v, x)
	}
	return v
}

func markerKey(tag TopicTag, partition int32) []byte {
	k := make([]byte, 0, 13)
	k = append(k, 'm')
	k = append(k, tag[:]...)
	return binary.BigEndian.AppendUint32(k, uint32(partition))
}

func markerValue(partitions int32, indexed int64) []byte {
	v := []byte{indexFormat}
	v = binary.AppendUvarint(v, uint64(partitions))
	return binary.AppendUvarint(v, uint64(indexed))
}

// parseCheckpoint decodes a checkpoint record. The key's offset must match
// the value's.
func parseCheckpoint(key, value []byte) (session string, l layout, c checkpoint, err error) {
	if len(key) < 1+8+1+8 || key[0] != 'c' {
		return "", l, c, errIndexRecord
	}
	copy(l.tag[:], key[1:9])
	n, w := binary.Uvarint(key[9:])
	if w <= 0 || uint64(len(key)-9-w) != n+8 {
		return "", l, c, errIndexRecord
	}
	session = string(key[9+w : 9+w+int(n)])
	r := reader{b: value, off: 1}
	if len(value) < 1 || value[0] != indexFormat {
		return "", l, c, errIndexRecord
	}
	part, parts := r.uvarint(), r.uvarint()
	off, ep, sq, dist := r.uvarint(), r.uvarint(), r.uvarint(), r.uvarint()
	if r.err != nil || r.off != len(value) || parts == 0 || part >= parts || parts > MaxPartitions ||
		off > 1<<62 || ep > 1<<62 || sq > 1<<62 || dist > 1<<62 ||
		binary.BigEndian.Uint64(key[len(key)-8:]) != off {
		return "", l, c, errIndexRecord
	}
	l.partition, l.partitions = int32(part), int32(parts)
	c = checkpoint{offset: int64(off), epoch: int64(ep), seq: int64(sq), distance: int64(dist)}
	return session, l, c, nil
}

func parseMarker(key, value []byte) (l layout, indexed int64, err error) {
	if len(key) != 13 || key[0] != 'm' || len(value) < 1 || value[0] != indexFormat {
		return l, 0, errIndexRecord
	}
	copy(l.tag[:], key[1:9])
	l.partition = int32(binary.BigEndian.Uint32(key[9:]))
	r := reader{b: value, off: 1}
	parts, x := r.uvarint(), r.uvarint()
	if r.err != nil || r.off != len(value) || parts == 0 || parts > MaxPartitions || l.partition < 0 ||
		int64(l.partition) >= int64(parts) || x > 1<<62 {
		return l, 0, errIndexRecord
	}
	l.partitions = int32(parts)
	return l, int64(x), nil
}
