package auditlog

import (
	"fmt"
	"sort"

	"github.com/aep-gateway/aep-gateway/internal/merkle"
)

// Logged is one record of an events partition as the verifier reads it:
// its offset and content hash (ContentHash).
type Logged struct {
	Offset  int64
	Content merkle.Hash
}

// Stored is one checkpoint record as read from the audit topic.
type Stored struct {
	AuditOffset int64 // offset of the checkpoint in the audit partition
	Checkpoint  *Checkpoint
	Err         error // the record did not decode (ParseCheckpoint)
}

// PartitionInput is what Verify checks of one partition: its checkpoints
// and its records, read from LogStart (the first retained offset) to
// LogEnd (the next offset to be written).
type PartitionInput struct {
	Partition        int32
	Checkpoints      []Stored
	Records          []Logged
	LogStart, LogEnd int64
	// AuditStart is the first retained offset of the audit partition:
	// above 0, retention deleted its oldest checkpoints, and each epoch is
	// verified from its oldest retained checkpoint's frontier on.
	AuditStart int64
}

// Kinds of Finding. Any finding fails the verification.
const (
	// the records
	KindModified  = "modified"  // the record at the offset is not the one sealed there
	KindMissing   = "missing"   // the record sealed at the offset is gone; later ones moved up
	KindInserted  = "inserted"  // a record never sealed stands at the offset; later ones moved down
	KindReordered = "reordered" // the record sealed at the offset stands at another sealed record's place, and that one at its
	KindMoved     = "moved"     // the record sealed at the offset stands at another offset (after a missing or inserted one)
	KindTruncated = "truncated" // the log ends below the offset, which was sealed
	// the checkpoints
	KindCheckpointSignature = "checkpoint-signature" // undecodable, unknown key or bad signature
	KindCheckpointMisplaced = "checkpoint-misplaced" // names another tenant or partition
	KindCheckpointFork      = "checkpoint-fork"      // two different heads (or leaves) for one size of one epoch
	KindCheckpointRoot      = "checkpoint-root"      // the leaves do not give the signed root
	KindCheckpointLeaves    = "checkpoint-leaves"    // leaves missing, or offsets not increasing
	KindCheckpointMissing   = "checkpoint-missing"   // an anchor checkpoint is absent
	KindCheckpointChain     = "checkpoint-chain"     // a head's prev is not the anchor below it
)

// Finding is one thing wrong, at a partition and offset (of the events
// topic for record kinds, of the audit topic for checkpoint kinds; -1 when
// none applies).
type Finding struct {
	Kind      string `json:"kind"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Detail    string `json:"detail"`
}

func (f Finding) String() string {
	return fmt.Sprintf("%s partition %d offset %d: %s", f.Kind, f.Partition, f.Offset, f.Detail)
}

// PartitionReport sums up one partition.
type PartitionReport struct {
	Partition   int32 `json:"partition"`
	Epochs      int   `json:"epochs"`
	Checkpoints int   `json:"checkpoints"`
	// Sealed counts the leaves of every epoch; Verified those whose record
	// is in the log as sealed; Expired those below the log start (deleted
	// by retention: see docs/audit.md) or below the oldest checkpoint the
	// audit topic's retention kept.
	Sealed   uint64 `json:"sealed"`
	Verified uint64 `json:"verified"`
	Expired  uint64 `json:"expired"`
	// Unsealed counts the records past the last sealed one (not yet
	// checkpointed: not a failure).
	Unsealed   int   `json:"unsealed"`
	LastSealed int64 `json:"last_sealed_offset"`
	Findings   int   `json:"findings"`
}

// Report is the outcome of Verify.
type Report struct {
	Tenant     string            `json:"tenant"`
	OK         bool              `json:"ok"`
	Partitions []PartitionReport `json:"partitions"`
	// Findings are at most MaxFindings per partition; PartitionReport
	// counts them all.
	Findings []Finding `json:"findings"`
}

// MaxFindings bounds the findings a report lists per partition.
const MaxFindings = 1000

// Verify checks the partitions of one tenant: every checkpoint's
// signature, the chain of heads, the signed roots against the leaves the
// checkpoints carry, and every record of the log against the leaf sealed
// at its offset.
func Verify(tenant string, keys Keys, parts []PartitionInput) Report {
	rep := Report{Tenant: tenant, OK: true}
	for _, in := range parts {
		v := &partVerifier{in: in, keys: keys, tenant: tenant, rep: PartitionReport{Partition: in.Partition, LastSealed: -1}}
		v.run()
		v.rep.Findings = v.count
		rep.Partitions = append(rep.Partitions, v.rep)
		rep.Findings = append(rep.Findings, v.findings...)
		if v.count > 0 {
			rep.OK = false
		}
	}
	return rep
}

type leaf struct {
	offset  int64
	content merkle.Hash
}

type epochState struct {
	heads  map[uint64]Head
	cps    map[uint64]*Checkpoint
	leaves map[uint64]leaf
	size   uint64 // the largest head
	seq    []leaf // leaves in index order, up to size (when complete)
}

type partVerifier struct {
	in       PartitionInput
	keys     Keys
	tenant   string
	rep      PartitionReport
	findings []Finding
	count    int
}

func (v *partVerifier) add(kind string, offset int64, format string, args ...any) {
	v.count++
	if len(v.findings) < MaxFindings {
		v.findings = append(v.findings, Finding{Kind: kind, Partition: v.in.Partition, Offset: offset, Detail: fmt.Sprintf(format, args...)})
	}
}

func (v *partVerifier) run() {
	epochs := v.readCheckpoints()
	order := make([]uint32, 0, len(epochs))
	for e := range epochs {
		order = append(order, e)
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	v.rep.Epochs = len(order)
	for _, e := range order {
		v.checkEpoch(e, epochs[e], epochs)
	}
	v.checkRecords(order, epochs)
}

// readCheckpoints checks each checkpoint's signature and place, and
// gathers heads and leaves by epoch.
func (v *partVerifier) readCheckpoints() map[uint32]*epochState {
	epochs := map[uint32]*epochState{}
	for _, st := range v.in.Checkpoints {
		c := st.Checkpoint
		if st.Err != nil || c == nil {
			v.add(KindCheckpointSignature, st.AuditOffset, "audit record does not decode: %v", st.Err)
			continue
		}
		if err := c.CheckSignature(v.keys); err != nil {
			v.add(KindCheckpointSignature, st.AuditOffset, "checkpoint of size %d, epoch %d: %v", c.Head.Size, c.Head.Epoch, err)
			continue
		}
		if c.Head.Tenant != v.tenant || c.Head.Partition != v.in.Partition {
			v.add(KindCheckpointMisplaced, st.AuditOffset, "checkpoint of tenant %q partition %d", c.Head.Tenant, c.Head.Partition)
			continue
		}
		v.rep.Checkpoints++
		es := epochs[c.Head.Epoch]
		if es == nil {
			es = &epochState{heads: map[uint64]Head{}, cps: map[uint64]*Checkpoint{}, leaves: map[uint64]leaf{}}
			epochs[c.Head.Epoch] = es
		}
		if h, ok := es.heads[c.Head.Size]; ok && h != c.Head {
			v.add(KindCheckpointFork, st.AuditOffset, "epoch %d: two different signed heads for size %d", c.Head.Epoch, c.Head.Size)
			continue
		}
		es.heads[c.Head.Size] = c.Head
		es.cps[c.Head.Size] = c
		es.size = max(es.size, c.Head.Size)
		for i, off := range c.Offsets {
			idx := c.LeavesFrom + uint64(i)
			l := leaf{off, merkle.Hash(c.Contents[i])}
			if old, ok := es.leaves[idx]; ok && old != l {
				v.add(KindCheckpointFork, st.AuditOffset, "epoch %d: two different leaves at index %d", c.Head.Epoch, idx)
				continue
			}
			es.leaves[idx] = l
		}
	}
	return epochs
}

// checkEpoch recomputes the roots of the epoch's heads from its leaves
// and checks its anchors and prev links.
func (v *partVerifier) checkEpoch(e uint32, es *epochState, all map[uint32]*epochState) {
	var tree merkle.Frontier
	start := uint64(0)
	if _, ok := es.leaves[0]; !ok && es.size > 0 && v.in.AuditStart > 0 {
		// The audit topic's retention deleted the epoch's first
		// checkpoints: go on from the oldest one kept whose frontier gives
		// its signed root.
		found := false
		for size, c := range es.cps {
			if f, err := c.FrontierState(); err == nil && (!found || size < start) {
				tree, start, found = f, size, true
			}
		}
		if !found {
			v.add(KindCheckpointLeaves, -1, "epoch %d: no retained checkpoint to verify from", e)
			return
		}
		v.rep.Expired += start
	}
	seq := make([]leaf, 0, es.size-start)
	for i := start; i < es.size; i++ {
		l, ok := es.leaves[i]
		if !ok {
			v.add(KindCheckpointLeaves, -1, "epoch %d: the leaf at index %d is in no checkpoint (the audit topic lost a record)", e, i)
			return
		}
		if len(seq) > 0 && l.offset <= seq[len(seq)-1].offset {
			v.add(KindCheckpointLeaves, l.offset, "epoch %d: leaf %d at offset %d does not follow offset %d", e, i, l.offset, seq[len(seq)-1].offset)
			return
		}
		seq = append(seq, l)
		tree.Append(Leaf(l.offset, l.content))
		n := i + 1
		h, ok := es.heads[n]
		if !ok {
			if n%AnchorEvery == 0 {
				v.add(KindCheckpointMissing, l.offset, "epoch %d: no checkpoint at the anchor size %d", e, n)
			}
			continue
		}
		if merkle.Hash(h.Root) != tree.Root() {
			v.add(KindCheckpointRoot, l.offset, "epoch %d: the head of size %d does not match its leaves", e, n)
		}
		if (start == 0 && h.FirstOffset != seq[0].offset) || h.LastOffset != l.offset {
			v.add(KindCheckpointLeaves, l.offset, "epoch %d: the head of size %d names offsets %d..%d, its leaves %d..%d", e, n, h.FirstOffset, h.LastOffset, seq[0].offset, l.offset)
		}
		v.checkPrev(e, h, es, all, l.offset)
	}
	es.seq = seq
}

func (v *partVerifier) checkPrev(e uint32, h Head, es *epochState, all map[uint32]*epochState, at int64) {
	if a := AnchorBelow(h.Size); a > 0 {
		if anchor, ok := es.heads[a]; ok && Digest(anchor.Hash()) != h.Prev {
			v.add(KindCheckpointChain, at, "epoch %d: the head of size %d does not name the anchor of size %d", e, h.Size, a)
		}
		return
	}
	if e == 0 {
		if h.Prev != (Digest{}) {
			v.add(KindCheckpointChain, at, "epoch 0: the head of size %d names a prev", h.Size)
		}
		return
	}
	before := all[e-1]
	if before == nil {
		v.add(KindCheckpointChain, at, "epoch %d follows no epoch %d", e, e-1)
		return
	}
	for _, ph := range before.heads {
		if Digest(ph.Hash()) == h.Prev {
			return
		}
	}
	v.add(KindCheckpointChain, at, "epoch %d: the head of size %d names no head of epoch %d", e, h.Size, e-1)
}

// checkRecords compares every sealed leaf with the record at its offset.
func (v *partVerifier) checkRecords(order []uint32, epochs map[uint32]*epochState) {
	byOffset := make(map[int64]merkle.Hash, len(v.in.Records))
	byContent := make(map[merkle.Hash]int64, len(v.in.Records))
	for _, r := range v.in.Records {
		byOffset[r.Offset] = r.Content
		if _, ok := byContent[r.Content]; !ok {
			byContent[r.Content] = r.Offset
		}
	}
	truncated := false
	for _, e := range order {
		es := epochs[e]
		sealedAt := make(map[merkle.Hash]int64, len(es.seq))
		for _, l := range es.seq {
			sealedAt[l.content] = l.offset
		}
		moved := 0
		for _, l := range es.seq {
			v.rep.Sealed++
			if l.offset < v.in.LogStart {
				v.rep.Expired++
				continue
			}
			got, ok := byOffset[l.offset]
			switch {
			case !ok && l.offset >= v.in.LogEnd:
				if !truncated {
					truncated = true
					v.add(KindTruncated, l.offset, "epoch %d sealed records up to offset %d; the log ends at %d", e, es.seq[len(es.seq)-1].offset, v.in.LogEnd)
				}
				continue
			case !ok:
				v.add(KindMissing, l.offset, "epoch %d: the sealed record is not in the log", e)
				continue
			case got == l.content:
				v.rep.Verified++
				continue
			}
			hAt, hFound := byContent[l.content]
			gotAt, gotSealed := sealedAt[got]
			switch {
			case hFound && gotSealed && gotAt == hAt:
				v.add(KindReordered, l.offset, "epoch %d: swapped with the record sealed at offset %d", e, hAt)
			case hFound && !gotSealed:
				v.add(KindInserted, l.offset, "epoch %d: a record that was never sealed stands here; the one sealed here is at offset %d", e, hAt)
			case hFound:
				if moved == 0 {
					v.add(KindMoved, l.offset, "epoch %d: the record sealed here stands at offset %d (and so may the ones after it)", e, hAt)
				}
				moved++
			case gotSealed:
				v.add(KindMissing, l.offset, "epoch %d: the record sealed here is nowhere in the log; here stands the one sealed at offset %d", e, gotAt)
			default:
				v.add(KindModified, l.offset, "epoch %d: the record here is not the one sealed (content hash differs)", e)
			}
		}
		if len(es.seq) > 0 {
			v.rep.LastSealed = es.seq[len(es.seq)-1].offset
		}
	}
	for _, r := range v.in.Records {
		if r.Offset > v.rep.LastSealed {
			v.rep.Unsealed++
		}
	}
}
