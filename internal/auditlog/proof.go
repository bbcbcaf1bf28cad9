package auditlog

import (
	"errors"
	"fmt"

	"github.com/aep-gateway/aep-gateway/internal/merkle"
)

// Proof is an inclusion proof of one events record in a signed head: the
// record itself, its offset and tree index, the signed checkpoint head,
// and the Merkle audit path (RFC 9162 §2.1.3). Anyone holding the public
// key checks it (Check) without access to the log.
type Proof struct {
	Version   string      `json:"version"`
	Offset    int64       `json:"offset"`
	Index     uint64      `json:"index"`
	Record    ProofRecord `json:"record"`
	Head      Head        `json:"head"`
	KeyID     string      `json:"key_id"`
	Sig       []byte      `json:"sig"`
	AuditPath []Digest    `json:"audit_path"`
}

// ProofRecord is the record as Kafka holds it (bytes base64 in JSON).
type ProofRecord struct {
	Key         []byte        `json:"key"`
	Value       []byte        `json:"value"`
	Headers     []ProofHeader `json:"headers"`
	TimestampMs int64         `json:"timestamp_ms"`
}

// ProofHeader is one header of ProofRecord.
type ProofHeader struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

const proofVersion = "aep-audit-proof/v1"

// ProofRecordOf is r as a proof carries it.
func ProofRecordOf(r Record) ProofRecord {
	pr := ProofRecord{Key: r.Key, Value: r.Value, TimestampMs: r.TimestampMs, Headers: []ProofHeader{}}
	for _, h := range r.Headers {
		pr.Headers = append(pr.Headers, ProofHeader{Key: string(h.Key), Value: h.Value})
	}
	return pr
}

// Record is the record pr carries.
func (pr ProofRecord) Record() Record {
	r := Record{Key: pr.Key, Value: pr.Value, TimestampMs: pr.TimestampMs}
	for _, h := range pr.Headers {
		r.Headers = append(r.Headers, Header{Key: []byte(h.Key), Value: h.Value})
	}
	return r
}

// NewProof proves the record rec at offset in the largest signed head of
// the latest epoch that sealed it, from the partition's checkpoints in
// the audit topic's order (decoded; signatures are checked by Verify, or
// by Proof.Check later).
func NewProof(cps []*Checkpoint, offset int64, rec Record) (*Proof, error) {
	s := NewProofScan(offset)
	for _, c := range cps {
		s.Head(c)
	}
	if err := s.Choose(); err != nil {
		return nil, err
	}
	for _, c := range cps {
		s.Leaves(c)
	}
	return s.Proof(rec)
}

// ProofScan builds a proof from a partition's checkpoints read twice, in
// the audit topic's order: Head with each, Choose, Leaves with each, Proof.
// It keeps O(log n) hashes, whatever the partition's size.
type ProofScan struct {
	offset int64
	epochs map[uint32]*scanEpoch
	epoch  uint32
	top    *Checkpoint
	index  uint64
	path   *merkle.Path
}

type scanEpoch struct {
	top   *Checkpoint
	index uint64
	found bool
}

// NewProofScan proves the record at offset.
func NewProofScan(offset int64) *ProofScan {
	return &ProofScan{offset: offset, epochs: map[uint32]*scanEpoch{}}
}

// Head reads c in the first pass.
func (s *ProofScan) Head(c *Checkpoint) {
	e := s.epochs[c.Head.Epoch]
	if e == nil {
		e = &scanEpoch{}
		s.epochs[c.Head.Epoch] = e
	}
	if e.top == nil || c.Head.Size > e.top.Head.Size {
		e.top = c
	}
	if !e.found {
		for i, off := range c.Offsets {
			if off == s.offset {
				e.index, e.found = c.LeavesFrom+uint64(i), true
			}
		}
	}
}

// Choose picks the latest epoch that sealed the record and its largest
// head; ErrNotSealed when none did.
func (s *ProofScan) Choose() error {
	found := false
	for n, e := range s.epochs {
		if e.found && e.top.Head.Size > e.index && (!found || n > s.epoch) {
			s.epoch, s.top, s.index, found = n, e.top, e.index, true
		}
	}
	if !found {
		return ErrNotSealed
	}
	var err error
	s.path, err = merkle.NewPath(s.index, s.top.Head.Size)
	return err
}

// Leaves reads c in the second pass.
func (s *ProofScan) Leaves(c *Checkpoint) {
	if c.Head.Epoch != s.epoch {
		return
	}
	for i, off := range c.Offsets {
		idx := c.LeavesFrom + uint64(i)
		if idx == s.path.Next() && idx < s.top.Head.Size {
			_ = s.path.Add(idx, Leaf(off, merkle.Hash(c.Contents[i])))
		}
	}
}

// Proof is the proof of rec, once both passes are done.
func (s *ProofScan) Proof(rec Record) (*Proof, error) {
	path, err := s.path.Proof()
	if err != nil {
		return nil, fmt.Errorf("auditlog: epoch %d: leaves missing from the checkpoints: %w", s.epoch, err)
	}
	return &Proof{Version: proofVersion, Offset: s.offset, Index: s.index, Record: ProofRecordOf(rec),
		Head: s.top.Head, KeyID: s.top.KeyID, Sig: s.top.Sig, AuditPath: digests(path)}, nil
}

// ErrNotSealed is returned for a record no checkpoint covers yet.
var ErrNotSealed = errors.New("auditlog: the record is not sealed yet")

// Errors of Proof.Check.
var (
	ErrProofVersion  = errors.New("auditlog: not an aep-audit-proof/v1")
	ErrProofIncluded = errors.New("auditlog: the record is not included in the signed head (record, offset, index or audit path altered)")
)

// Check verifies the head's signature with keys and the record's
// inclusion in it.
func (p *Proof) Check(keys Keys) error {
	if p.Version != proofVersion {
		return ErrProofVersion
	}
	cp := Checkpoint{Head: p.Head, KeyID: p.KeyID, Sig: p.Sig}
	if err := cp.CheckSignature(keys); err != nil {
		return err
	}
	l := Leaf(p.Offset, ContentHash(p.Record.Record()))
	if p.Offset < p.Head.FirstOffset || p.Offset > p.Head.LastOffset ||
		!merkle.VerifyInclusion(l, p.Index, p.Head.Size, hashes(p.AuditPath), merkle.Hash(p.Head.Root)) {
		return ErrProofIncluded
	}
	return nil
}
