// Package merkle is the Merkle tree of RFC 9162 (Certificate Transparency
// 2.0, §2.1) over a list of leaves: the tree head of any prefix of the list,
// computed incrementally from a frontier of O(log n) hashes (Frontier), and
// the inclusion and consistency proofs with their verification.
//
// Hashing is RFC 9162's: a leaf is SHA-256(0x00 || data), an interior node
// SHA-256(0x01 || left || right), the empty tree SHA-256(""), and a tree of
// n leaves splits at k, the largest power of two smaller than n. Every
// function is pure and safe for concurrent use.
package merkle

import (
	"crypto/sha256"
	"errors"
	"math/bits"
)

// Hash is one SHA-256 value of the tree.
type Hash = [sha256.Size]byte

// EmptyRoot is the head of the tree of no leaves: SHA-256 of nothing.
var EmptyRoot = sha256.Sum256(nil)

// LeafHash is the hash of one leaf's data.
func LeafHash(data []byte) Hash {
	h := sha256.New()
	h.Write([]byte{0})
	h.Write(data)
	var out Hash
	h.Sum(out[:0])
	return out
}

// NodeHash is the hash of an interior node.
func NodeHash(left, right Hash) Hash {
	var buf [1 + 2*sha256.Size]byte
	buf[0] = 1
	copy(buf[1:], left[:])
	copy(buf[1+sha256.Size:], right[:])
	return sha256.Sum256(buf[:])
}

// Frontier is the state of an append-only tree from which its head at the
// current size follows: the roots of the perfect subtrees that the size's
// binary digits decompose it into, largest (leftmost) first. Its zero
// value is the empty tree. It holds at most 64 hashes whatever the size.
type Frontier struct {
	size  uint64
	peaks []Hash
}

// Size is the number of leaves appended.
func (f *Frontier) Size() uint64 { return f.size }

// Append adds the leaf whose hash is leaf.
func (f *Frontier) Append(leaf Hash) {
	h := leaf
	// Merge with the peaks of equal size: one per trailing 1 bit of size.
	for n := f.size; n&1 == 1; n >>= 1 {
		last := len(f.peaks) - 1
		h = NodeHash(f.peaks[last], h)
		f.peaks = f.peaks[:last]
	}
	f.peaks = append(f.peaks, h)
	f.size++
}

// Root is the tree head at the current size (RFC 9162 §2.1.1): the peaks
// combined from the right.
func (f *Frontier) Root() Hash {
	if len(f.peaks) == 0 {
		return EmptyRoot
	}
	h := f.peaks[len(f.peaks)-1]
	for i := len(f.peaks) - 2; i >= 0; i-- {
		h = NodeHash(f.peaks[i], h)
	}
	return h
}

// Clone is an independent copy.
func (f *Frontier) Clone() Frontier {
	return Frontier{size: f.size, peaks: append([]Hash(nil), f.peaks...)}
}

// Root is the tree head of the leaves whose hashes are leaves.
func Root(leaves []Hash) Hash {
	switch len(leaves) {
	case 0:
		return EmptyRoot
	case 1:
		return leaves[0]
	}
	k := split(len(leaves))
	return NodeHash(Root(leaves[:k]), Root(leaves[k:]))
}

// split is the largest power of two smaller than n (n >= 2).
func split(n int) int { return 1 << (bits.Len(uint(n-1)) - 1) }

// InclusionProof is the audit path of leaf index in the tree of leaves
// (RFC 9162 §2.1.3.1), leaf first.
func InclusionProof(leaves []Hash, index int) ([]Hash, error) {
	if index < 0 || index >= len(leaves) {
		return nil, errors.New("merkle: leaf index out of range")
	}
	var path []Hash
	for len(leaves) > 1 {
		k := split(len(leaves))
		if index < k {
			path = append(path, Root(leaves[k:]))
			leaves = leaves[:k]
		} else {
			path = append(path, Root(leaves[:k]))
			leaves, index = leaves[k:], index-k
		}
	}
	// Built root first; the proof lists the path from the leaf up.
	for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
		path[i], path[j] = path[j], path[i]
	}
	return path, nil
}

// VerifyInclusion reports whether proof shows leaf at index in the tree of
// size whose head is root (RFC 9162 §2.1.3.2).
func VerifyInclusion(leaf Hash, index, size uint64, proof []Hash, root Hash) bool {
	if index >= size {
		return false
	}
	fn, sn := index, size-1
	r := leaf
	for _, p := range proof {
		if sn == 0 {
			return false
		}
		if fn&1 == 1 || fn == sn {
			r = NodeHash(p, r)
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			r = NodeHash(r, p)
		}
		fn >>= 1
		sn >>= 1
	}
	return sn == 0 && r == root
}

// ConsistencyProof is the proof that the tree of the first m leaves is a
// prefix of the tree of all leaves (RFC 9162 §2.1.4.1), 0 < m <= n.
func ConsistencyProof(leaves []Hash, m int) ([]Hash, error) {
	if m <= 0 || m > len(leaves) {
		return nil, errors.New("merkle: consistency proof of a size out of range")
	}
	return subproof(m, leaves, true), nil
}

func subproof(m int, leaves []Hash, complete bool) []Hash {
	n := len(leaves)
	if m == n {
		if complete {
			return nil
		}
		return []Hash{Root(leaves)}
	}
	k := split(n)
	if m <= k {
		return append(subproof(m, leaves[:k], complete), Root(leaves[k:]))
	}
	return append(subproof(m-k, leaves[k:], false), Root(leaves[:k]))
}

// VerifyConsistency reports whether proof shows that the tree of size1
// with head root1 is a prefix of the tree of size2 with head root2 (RFC
// 9162 §2.1.4.2).
func VerifyConsistency(size1, size2 uint64, root1, root2 Hash, proof []Hash) bool {
	switch {
	case size1 == 0 || size1 > size2:
		return false
	case size1 == size2:
		return len(proof) == 0 && root1 == root2
	case len(proof) == 0:
		return false
	}
	// size1 a power of two: its root is the first node of the path.
	if size1&(size1-1) == 0 {
		proof = append([]Hash{root1}, proof...)
	}
	fn, sn := size1-1, size2-1
	for fn&1 == 1 {
		fn >>= 1
		sn >>= 1
	}
	fr, sr := proof[0], proof[0]
	for _, c := range proof[1:] {
		if sn == 0 {
			return false
		}
		if fn&1 == 1 || fn == sn {
			fr = NodeHash(c, fr)
			sr = NodeHash(c, sr)
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			sr = NodeHash(sr, c)
		}
		fn >>= 1
		sn >>= 1
	}
	return fr == root1 && sr == root2 && sn == 0
}

// Peaks are the frontier's subtree roots, largest first: with Size, what
// NewFrontier restores it from.
func (f *Frontier) Peaks() []Hash { return append([]Hash(nil), f.peaks...) }

// ErrFrontier is returned by NewFrontier for peaks that cannot be the
// frontier of a tree of the given size.
var ErrFrontier = errors.New("merkle: the number of peaks does not match the size")

// NewFrontier restores the frontier of a tree of size leaves from its
// peaks (Frontier.Peaks): one per binary 1 digit of size.
func NewFrontier(size uint64, peaks []Hash) (Frontier, error) {
	if bits.OnesCount64(size) != len(peaks) {
		return Frontier{}, ErrFrontier
	}
	return Frontier{size: size, peaks: append([]Hash(nil), peaks...)}, nil
}

// Range is the leaves [Start, End) of a tree.
type Range struct{ Start, End uint64 }

// PathRanges are the leaf ranges whose heads make the audit path of leaf
// index in a tree of size leaves, in the order of InclusionProof (leaf
// first): a proof can be built by streaming the leaves once through a
// Frontier per range, in O(log n) memory (Path).
func PathRanges(index, size uint64) ([]Range, error) {
	if index >= size {
		return nil, errors.New("merkle: leaf index out of range")
	}
	var out []Range
	lo, n := uint64(0), size
	for n > 1 {
		k := uint64(split(int(n)))
		if index-lo < k {
			out = append(out, Range{lo + k, lo + n})
			n = k
		} else {
			out = append(out, Range{lo, lo + k})
			lo, n = lo+k, n-k
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// Path builds an audit path from leaves streamed in index order (Add),
// keeping one frontier per range of PathRanges.
type Path struct {
	ranges []Range
	trees  []Frontier
	next   uint64
}

// NewPath prepares the audit path of leaf index in a tree of size leaves.
func NewPath(index, size uint64) (*Path, error) {
	rs, err := PathRanges(index, size)
	if err != nil {
		return nil, err
	}
	return &Path{ranges: rs, trees: make([]Frontier, len(rs))}, nil
}

// Add takes the next leaf (index order, from 0). It returns an error for
// a leaf out of order.
func (p *Path) Add(i uint64, leaf Hash) error {
	if i != p.next {
		return errors.New("merkle: leaves out of order")
	}
	p.next++
	for j, r := range p.ranges {
		if i >= r.Start && i < r.End {
			p.trees[j].Append(leaf)
		}
	}
	return nil
}

// Next is the index of the next leaf Add takes.
func (p *Path) Next() uint64 { return p.next }

// Proof is the audit path, once every leaf of the ranges was added.
func (p *Path) Proof() ([]Hash, error) {
	out := make([]Hash, len(p.ranges))
	for j, r := range p.ranges {
		if p.trees[j].Size() != r.End-r.Start {
			return nil, errors.New("merkle: the leaves of the path were not all added")
		}
		out[j] = p.trees[j].Root()
	}
	return out, nil
}
