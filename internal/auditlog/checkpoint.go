package auditlog

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aep-gateway/aep-gateway/internal/merkle"
)

// AnchorEvery is the tree size step of a chain's anchors: a sealer always
// writes the checkpoint at every multiple of it, and every head's prev is
// the hash of the anchor below its size. Part of the format: a head's prev
// depends on the records alone, never on when a sealer happened to write.
const AnchorEvery = 1024

// Head is the signed tree head of one chain of one partition: the Merkle
// root (RFC 9162) over the leaves (Leaf) of the records from FirstOffset,
// Size of them, the last at LastOffset. Every field follows from the
// records and the chain's start, so two sealers (a restarted one, a zombie
// beside the group's new owner) sign the same head for the same size.
type Head struct {
	Tenant    string `json:"tenant"`
	Partition int32  `json:"partition"`
	// Epoch counts the chains of the partition: a sealer that finds the
	// log restarted below what it sealed (a truncated and refilled
	// partition) begins the next epoch, whose first head's prev is the
	// hash of the last head of the one before.
	Epoch       uint32 `json:"epoch"`
	FirstOffset int64  `json:"first_offset"`
	Size        uint64 `json:"size"`
	LastOffset  int64  `json:"last_offset"`
	LastTimeMs  int64  `json:"last_timestamp_ms"`
	Root        Digest `json:"root"`
	// Prev is the hash (Head.Hash) of the anchor below Size: the head at
	// the largest multiple of AnchorEvery smaller than Size; for sizes up
	// to AnchorEvery, zero in epoch 0, else the last head of the previous
	// epoch.
	Prev Digest `json:"prev"`
}

const headTextVersion = "aep-audit-checkpoint/v1"

// Text is the signed message: one "name value" line per field after the
// version line, hashes in hex.
func (h Head) Text() []byte {
	var b strings.Builder
	b.WriteString(headTextVersion + "\n")
	fmt.Fprintf(&b, "tenant %s\npartition %d\nepoch %d\nfirst_offset %d\nsize %d\nlast_offset %d\nlast_timestamp_ms %d\nroot %x\nprev %x\n",
		h.Tenant, h.Partition, h.Epoch, h.FirstOffset, h.Size, h.LastOffset, h.LastTimeMs, h.Root, h.Prev)
	return []byte(b.String())
}

// Hash is the SHA-256 of Text: what the next heads' Prev names.
func (h Head) Hash() merkle.Hash { return sha256.Sum256(h.Text()) }

// AnchorBelow is the anchor size whose head a head of size n names as
// prev; 0 means none in this epoch.
func AnchorBelow(n uint64) uint64 {
	if n == 0 {
		return 0
	}
	return (n - 1) / AnchorEvery * AnchorEvery
}

// Checkpoint is one record of the audit topic (its value, JSON): a signed
// head, the leaves it adds since the checkpoint its sealer wrote before,
// and the frontier that continues the tree (merkle.NewFrontier). Leaves
// and frontier are not signed: they are checked against the signed root.
type Checkpoint struct {
	Head  Head   `json:"head"`
	KeyID string `json:"key_id"`
	Sig   []byte `json:"sig"`
	// LeavesFrom is the tree index of Offsets[0] and Contents[0].
	LeavesFrom uint64   `json:"leaves_from"`
	Offsets    []int64  `json:"offsets"`
	Contents   []Digest `json:"contents"`
	Frontier   []Digest `json:"frontier"`
}

// Key is the Kafka key of the checkpoint's record.
func (c *Checkpoint) Key() []byte {
	return []byte("p" + strconv.Itoa(int(c.Head.Partition)) + "/e" + strconv.Itoa(int(c.Head.Epoch)) + "/n" + strconv.FormatUint(c.Head.Size, 10))
}

// Errors of Checkpoint.Check.
var (
	ErrUnknownKey   = errors.New("auditlog: checkpoint signed by an unknown key")
	ErrBadSignature = errors.New("auditlog: checkpoint signature does not verify")
	ErrBadFrontier  = errors.New("auditlog: checkpoint frontier does not give its root")
	ErrBadLeaves    = errors.New("auditlog: checkpoint leaves are not those of its size")
)

// CheckSignature verifies the head's signature with keys.
func (c *Checkpoint) CheckSignature(keys Keys) error {
	pub, ok := keys[c.KeyID]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownKey, c.KeyID)
	}
	if !ed25519.Verify(pub, c.Head.Text(), c.Sig) {
		return ErrBadSignature
	}
	return nil
}

// FrontierState is the checkpoint's frontier, checked against its root.
func (c *Checkpoint) FrontierState() (merkle.Frontier, error) {
	f, err := merkle.NewFrontier(c.Head.Size, hashes(c.Frontier))
	if err != nil || f.Root() != merkle.Hash(c.Head.Root) {
		return merkle.Frontier{}, ErrBadFrontier
	}
	return f, nil
}

// Marshal is the record value.
func (c *Checkpoint) Marshal() []byte {
	b, _ := json.Marshal(c) // nothing in it fails to marshal
	return b
}

// ParseCheckpoint decodes a record value of the audit topic.
func ParseCheckpoint(b []byte) (*Checkpoint, error) {
	var c Checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("auditlog: checkpoint: %w", err)
	}
	if len(c.Offsets) != len(c.Contents) || c.LeavesFrom+uint64(len(c.Offsets)) > c.Head.Size {
		return nil, ErrBadLeaves
	}
	return &c, nil
}
