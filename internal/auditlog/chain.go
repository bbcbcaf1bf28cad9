package auditlog

import (
	"fmt"

	"github.com/aep-gateway/aep-gateway/internal/merkle"
)

// Chain is a sealer's state for one partition: the tree of the records it
// sealed, the leaves not yet written in a checkpoint, and the anchor that
// the next heads name as prev. It is pure: the sealer feeds it records in
// offset order and writes the checkpoints it returns.
type Chain struct {
	tenant    string
	partition int32
	epoch     uint32
	first     int64
	tree      merkle.Frontier
	last      int64
	lastTime  int64
	prev      Digest // hash of the anchor below the current size
	lastHead  *Head  // the head at the current size, once built
	written   uint64 // size of the last checkpoint built
	offsets   []int64
	contents  []Digest
}

// NewChain starts epoch 0 of a partition that has no checkpoint.
func NewChain(tenant string, partition int32) *Chain {
	return &Chain{tenant: tenant, partition: partition, last: -1}
}

// NewChainAt starts epoch 0 of a partition that has no checkpoint at its
// log start: LastOffset is start-1, where reading begins.
func NewChainAt(tenant string, partition int32, start int64) *Chain {
	return &Chain{tenant: tenant, partition: partition, last: start - 1}
}

// RestoreChain continues the chain from its last checkpoint c, whose
// frontier must give its root.
func RestoreChain(c *Checkpoint) (*Chain, error) {
	f, err := c.FrontierState()
	if err != nil {
		return nil, err
	}
	h := c.Head
	return &Chain{tenant: h.Tenant, partition: h.Partition, epoch: h.Epoch, first: h.FirstOffset, tree: f,
		last: h.LastOffset, lastTime: h.LastTimeMs, prev: h.Prev, lastHead: &h, written: h.Size}, nil
}

// Size is the number of records sealed.
func (c *Chain) Size() uint64 { return c.tree.Size() }

// LastOffset is the offset of the last record sealed, -1 for none.
func (c *Chain) LastOffset() int64 { return c.last }

// Epoch is the chain's epoch.
func (c *Chain) Epoch() uint32 { return c.epoch }

// Pending is the number of records sealed since the last checkpoint.
func (c *Chain) Pending() int { return len(c.offsets) }

// Behind reports whether offset is at or below the last sealed one: the
// log restarted under the chain (Restart).
func (c *Chain) Behind(offset int64) bool { return c.tree.Size() > 0 && offset <= c.last }

// Restart begins the next epoch at the next record; its first heads name
// the current head as prev. The caller writes the current checkpoint
// first (Checkpoint) when Pending is not zero.
func (c *Chain) Restart() {
	prev := Digest(c.head().Hash())
	*c = Chain{tenant: c.tenant, partition: c.partition, epoch: c.epoch + 1, last: -1, prev: prev}
}

// Append seals the record at offset with content hash content. It returns
// true when the size reached an anchor: the caller writes Checkpoint now.
func (c *Chain) Append(offset int64, content merkle.Hash, timeMs int64) bool {
	if c.tree.Size() == 0 {
		c.first = offset
	}
	if c.lastHead != nil && c.lastHead.Size%AnchorEvery == 0 && c.lastHead.Size > 0 {
		c.prev = Digest(c.lastHead.Hash()) // heads past an anchor name it
	}
	c.tree.Append(Leaf(offset, content))
	c.last, c.lastTime = offset, timeMs
	c.lastHead = nil
	c.offsets = append(c.offsets, offset)
	c.contents = append(c.contents, Digest(content))
	if c.tree.Size()%AnchorEvery == 0 {
		c.head() // keep the anchor's head for the prev of the next ones
		return true
	}
	return false
}

// head is the head at the current size.
func (c *Chain) head() Head {
	if c.lastHead == nil {
		c.lastHead = &Head{Tenant: c.tenant, Partition: c.partition, Epoch: c.epoch, FirstOffset: c.first,
			Size: c.tree.Size(), LastOffset: c.last, LastTimeMs: c.lastTime, Root: Digest(c.tree.Root()), Prev: c.prev}
	}
	return *c.lastHead
}

// Checkpoint signs the head at the current size with the leaves sealed
// since the last one, and clears them. Nil when nothing was sealed since.
func (c *Chain) Checkpoint(s *Signer) *Checkpoint {
	if len(c.offsets) == 0 {
		return nil
	}
	h := c.head()
	cp := &Checkpoint{Head: h, KeyID: s.KeyID(), Sig: s.Sign(h.Text()), LeavesFrom: c.written,
		Offsets: c.offsets, Contents: c.contents, Frontier: digests(c.tree.Peaks())}
	c.written = h.Size
	c.offsets, c.contents = nil, nil
	return cp
}

func (c *Chain) String() string {
	return fmt.Sprintf("%s/%d epoch %d size %d last %d", c.tenant, c.partition, c.epoch, c.tree.Size(), c.last)
}
