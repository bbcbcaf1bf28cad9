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
// the latest epoch that sealed it, from the partition's checkpoints
// (decoded, signatures checked by the caller's Verify or by Check later).
func NewProof(cps []*Checkpoint, offset int64, rec Record) (*Proof, error) {
	type ep struct {
		heads  map[uint64]*Checkpoint
		leaves map[uint64]leaf
	}
	eps := map[uint32]*ep{}
	for _, c := range cps {
		e := eps[c.Head.Epoch]
		if e == nil {
			e = &ep{heads: map[uint64]*Checkpoint{}, leaves: map[uint64]leaf{}}
			eps[c.Head.Epoch] = e
		}
		e.heads[c.Head.Size] = c
		for i, off := range c.Offsets {
			e.leaves[c.LeavesFrom+uint64(i)] = leaf{off, merkle.Hash(c.Contents[i])}
		}
	}
	var best *Proof
	for epoch, e := range eps {
		var top *Checkpoint
		for _, c := range e.heads {
			if top == nil || c.Head.Size > top.Head.Size {
				top = c
			}
		}
		if top == nil || top.Head.LastOffset < offset || top.Head.FirstOffset > offset {
			continue
		}
		hs := make([]merkle.Hash, top.Head.Size)
		index := uint64(0)
		found := false
		for i := range top.Head.Size {
			l, ok := e.leaves[i]
			if !ok {
				return nil, fmt.Errorf("auditlog: epoch %d: the leaf at index %d is in no checkpoint", epoch, i)
			}
			hs[i] = Leaf(l.offset, l.content)
			if l.offset == offset {
				index, found = i, true
			}
		}
		if !found || (best != nil && best.Head.Epoch > epoch) {
			continue
		}
		path, err := merkle.InclusionProof(hs, int(index))
		if err != nil {
			return nil, err
		}
		best = &Proof{Version: proofVersion, Offset: offset, Index: index, Record: ProofRecordOf(rec),
			Head: top.Head, KeyID: top.KeyID, Sig: top.Sig, AuditPath: digests(path)}
	}
	if best == nil {
		return nil, ErrNotSealed
	}
	return best, nil
}

// ErrNotSealed is returned by NewProof for a record no checkpoint covers
// yet.
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
