// Package segrepair confines damage in the embedded broker's segment files
// to what is damaged. kfake (franz-go's in-process broker) stores each
// partition as segments <base>.dat of Kafka record batches (v2, CRC-32C)
// with an index <base>.idx of fixed-size entries, one per batch; when it
// loads a segment it stops at the first batch whose checksum fails and
// truncates the file there, dropping every intact batch after it.
//
// Repair runs before the broker loads its data directory: in every
// segment it replaces each damaged run of bytes that intact batches
// follow with one valid batch of empty records covering exactly the
// offsets the damaged bytes held (so no offset is reused and no intact
// record moves), moves the damaged bytes to a quarantine file, keeps the
// index aligned, and reports what was lost and where. A damaged run at
// the very end of a partition's last segment is a torn write (a crash
// mid-append): its offsets were never acknowledged by a completed write,
// so it is left to the broker's own truncation and reported as torn.
package segrepair

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Layout of kfake's files this package relies on (kfake persist.go at the
// version go.mod pins): partitions/<topic>-<partition>/<base>.dat and
// <base>.idx, indexEntrySize bytes per batch.
const (
	partitionsDir  = "partitions"
	indexEntrySize = 15

	headerLen  = 61 // a v2 batch's fixed header, records excluded
	maxBatch   = 1 << 30
	crcStart   = 21 // the CRC covers the batch from the attributes on
	crcField   = 17
	magicField = 16
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// FillerKey is the key of the empty records that stand for lost ones.
const FillerKey = "aep-gateway:damaged"

// Damage is one damaged run of a segment.
type Damage struct {
	Topic     string
	Partition int32
	Segment   string // the segment file, relative to the broker's directory
	// FirstOffset and LastOffset are the offsets the damaged bytes held
	// (-1 when unknown: a torn tail).
	FirstOffset, LastOffset int64
	Bytes                   int
	// Quarantine is the file holding the damaged bytes ("" for a torn
	// tail, left to the broker).
	Quarantine string
	Torn       bool // at the end of the partition's last segment: left to the broker
}

// Lost is how many offsets the damage replaced with empty records.
func (d Damage) Lost() int64 {
	if d.Torn || d.FirstOffset < 0 {
		return 0
	}
	return d.LastOffset - d.FirstOffset + 1
}

// Repair scans every segment under kafkaDir and repairs it in place,
// writing damaged bytes under quarantineDir. It returns every damage found
// (repaired or torn); an error means a segment could not be read or
// rewritten (the broker's load then does what it did before).
func Repair(kafkaDir, quarantineDir string) ([]Damage, error) {
	root := filepath.Join(kafkaDir, partitionsDir)
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("segrepair: %w", err)
	}
	var all []Damage
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		i := strings.LastIndexByte(e.Name(), '-')
		p, perr := strconv.ParseInt(e.Name()[i+1:], 10, 32)
		if i <= 0 || perr != nil {
			continue
		}
		ds, err := repairPartition(kafkaDir, filepath.Join(root, e.Name()), e.Name()[:i], int32(p), quarantineDir)
		all = append(all, ds...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return all, errors.Join(errs...)
}

func repairPartition(kafkaDir, dir, topic string, p int32, quarantineDir string) ([]Damage, error) {
	names, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("segrepair: %w", err)
	}
	var bases []int64
	for _, n := range names {
		if b, ok := strings.CutSuffix(n.Name(), ".dat"); ok {
			if v, err := strconv.ParseInt(b, 10, 64); err == nil {
				bases = append(bases, v)
			}
		}
	}
	slices.Sort(bases)
	var out []Damage
	for i, base := range bases {
		next := int64(-1) // the next segment's base: where this one's offsets end
		if i+1 < len(bases) {
			next = bases[i+1]
		}
		ds, err := repairSegment(kafkaDir, dir, topic, p, base, next, quarantineDir)
		out = append(out, ds...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// batchAt reports the length of a valid batch at raw[pos:] (0: none) and
// its base and last offset.
func batchAt(raw []byte, pos int) (size int, base, last int64) {
	if pos+headerLen > len(raw) {
		return 0, 0, 0
	}
	n := int(binary.BigEndian.Uint32(raw[pos+8 : pos+12]))
	if n < headerLen-12 || n > maxBatch || pos+12+n > len(raw) || raw[pos+magicField] != 2 {
		return 0, 0, 0
	}
	b := raw[pos : pos+12+n]
	if binary.BigEndian.Uint32(b[crcField:crcStart]) != crc32.Checksum(b[crcStart:], castagnoli) {
		return 0, 0, 0
	}
	base = int64(binary.BigEndian.Uint64(b[0:8]))
	lod := int64(int32(binary.BigEndian.Uint32(b[23:27])))
	if base < 0 || lod < 0 {
		return 0, 0, 0
	}
	return len(b), base, base + lod
}

type span struct {
	from, to   int   // bytes [from, to) of the segment
	first, end int64 // offsets [first, end)
	ts         int64 // a timestamp for the filler (the last intact batch's)
}

func repairSegment(kafkaDir, dir, topic string, p int32, base, nextBase int64, quarantineDir string) (damage []Damage, err error) {
	segPath := filepath.Join(dir, strconv.FormatInt(base, 10)+".dat")
	raw, err := os.ReadFile(segPath)
	if err != nil {
		return nil, fmt.Errorf("segrepair: %w", err)
	}
	rel, _ := filepath.Rel(kafkaDir, segPath)
	var (
		spans  []span
		intact int
		pos    int
		expect = base // the next offset
		ts     int64
		torn   *Damage // reported after the runs, in offset order
	)
	defer func() {
		if torn != nil {
			damage = append(damage, *torn)
		}
	}()
	for pos < len(raw) {
		// b > expect: offsets compaction removed (or a segment that
		// starts past its name), not damage
		if n, b, last := batchAt(raw, pos); n > 0 && b >= expect {
			ts = int64(binary.BigEndian.Uint64(raw[pos+27+8 : pos+27+16])) // MaxTimestamp
			pos += n
			expect = last + 1
			intact++
			continue
		}
		// Damaged from pos: the next valid batch at or past the offsets
		// expected, scanning byte by byte.
		q := pos + 1
		var qBase int64 = -1
		for ; q < len(raw); q++ {
			if n, b, _ := batchAt(raw, q); n > 0 && b >= expect {
				qBase = b
				break
			}
		}
		if qBase < 0 {
			if nextBase < 0 {
				torn = &Damage{Topic: topic, Partition: p, Segment: rel, FirstOffset: -1, LastOffset: -1, Bytes: len(raw) - pos, Torn: true}
				break
			}
			q, qBase = len(raw), nextBase // the rest of a sealed segment: its offsets end where the next begins
		}
		// qBase == expect: bytes that held no offset (dropped, nothing lost)
		spans = append(spans, span{from: pos, to: q, first: expect, end: qBase, ts: ts})
		pos, expect = q, qBase
	}
	if len(spans) == 0 {
		return damage, nil
	}
	idxPath := filepath.Join(dir, strconv.FormatInt(base, 10)+".idx")
	idxRaw, _ := os.ReadFile(idxPath) // missing: the broker reads epoch 0
	seg, idx, err := rebuild(raw, idxRaw, spans, intact)
	if err != nil {
		return damage, fmt.Errorf("segrepair: %s: %w", rel, err)
	}
	for _, s := range spans {
		d := Damage{Topic: topic, Partition: p, Segment: rel, FirstOffset: s.first, LastOffset: s.end - 1, Bytes: s.to - s.from}
		if s.end == s.first {
			d.FirstOffset, d.LastOffset = -1, -1 // no offset lost
		}
		if err := os.MkdirAll(quarantineDir, 0o700); err != nil {
			return damage, fmt.Errorf("segrepair: %w", err)
		}
		d.Quarantine = filepath.Join(quarantineDir, fmt.Sprintf("%s-%d-%d-%d.bin", topic, p, s.first, s.end-1))
		if err := os.WriteFile(d.Quarantine, raw[s.from:s.to], 0o600); err != nil {
			return damage, fmt.Errorf("segrepair: %w", err)
		}
		damage = append(damage, d)
	}
	if err := writeAtomic(segPath, seg); err != nil {
		return damage, err
	}
	if len(idxRaw) > 0 {
		if err := writeAtomic(idxPath, idx); err != nil {
			return damage, err
		}
	}
	return damage, nil
}

// maxFiller bounds the offsets one filler batch stands for.
const maxFiller = 10_000_000

// rebuild is the segment with each span replaced by a filler batch, and
// its index: intact batches keep their entries in order; the entries the
// damaged runs held (all entries beyond the intact batches' count) go,
// one taken per run but the last, which takes the rest, and each filler
// gets a copy of the first entry its run held (or of the entry before it).
func rebuild(raw, idxRaw []byte, spans []span, intact int) (seg, idx []byte, err error) {
	entries := len(idxRaw) / indexEntrySize
	spare := entries - intact
	entry := func(i int) []byte {
		if i < 0 || i >= entries {
			return make([]byte, indexEntrySize) // fails the broker's check: epoch 0
		}
		return idxRaw[i*indexEntrySize : (i+1)*indexEntrySize]
	}
	at, e := 0, 0   // bytes of raw and entries of idxRaw taken so far
	var epoch int32 // the partition leader epoch of the last batch kept
	copyIntact := func(to int) {
		for at < to {
			n, _, _ := batchAt(raw, at)
			if n == 0 { // not a batch: cannot be (spans cover every damaged byte)
				at = to
				break
			}
			epoch = int32(binary.BigEndian.Uint32(raw[at+12 : at+16]))
			seg = append(seg, raw[at:at+n]...)
			idx = append(idx, entry(e)...)
			at += n
			e++
		}
	}
	for k, s := range spans {
		copyIntact(s.from)
		at = s.to
		if s.end == s.first {
			continue // bytes that held no offset: dropped
		}
		f, ferr := filler(s.first, s.end, s.ts, epoch)
		if ferr != nil {
			return nil, nil, ferr
		}
		seg = append(seg, f...)
		held := min(1, spare)
		if k == len(spans)-1 {
			held = spare
		}
		if held > 0 {
			idx = append(idx, entry(e)...)
		} else {
			idx = append(idx, entry(e-1)...)
		}
		e += held
		spare -= held
	}
	copyIntact(len(raw))
	return seg, idx, nil
}

// filler is a valid v2 batch of end-first empty records (key FillerKey, no
// value, no headers) at offsets [first, end).
func filler(first, end, ts int64, epoch int32) ([]byte, error) {
	n := end - first
	if n <= 0 || n > maxFiller {
		return nil, fmt.Errorf("%d offsets to fill at %d, more than %d", n, first, maxFiller)
	}
	if ts <= 0 {
		ts = time.Now().UnixMilli()
	}
	var recs, body []byte
	for i := range n {
		body = append(body[:0], 0)          // attributes
		body = binary.AppendVarint(body, 0) // timestamp delta
		body = binary.AppendVarint(body, i) // offset delta
		body = binary.AppendVarint(body, int64(len(FillerKey)))
		body = append(body, FillerKey...)
		body = binary.AppendVarint(body, -1) // no value
		body = binary.AppendVarint(body, 0)  // no headers
		recs = binary.AppendVarint(recs, int64(len(body)))
		recs = append(recs, body...)
	}
	b := kmsg.RecordBatch{
		FirstOffset: first, PartitionLeaderEpoch: epoch, Magic: 2,
		LastOffsetDelta: int32(n - 1), FirstTimestamp: ts, MaxTimestamp: ts,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(n), Records: recs,
	}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:12], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[crcField:crcStart], crc32.Checksum(out[crcStart:], castagnoli))
	return out, nil
}

// writeAtomic replaces path with b (a temporary file renamed over it).
func writeAtomic(path string, b []byte) error {
	tmp := path + ".repair"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("segrepair: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("segrepair: %w", err)
	}
	return nil
}
