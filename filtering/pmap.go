package filtering

import (
	"hash/maphash"
	"math/bits"
)

// pmap is a persistent (immutable) hash map from string keys to V: a
// hash array mapped trie with 32-way nodes. Lookups never allocate; set and
// del return a new map that shares all but the O(log32 n) nodes on the
// changed path, so a subscribe costs the same at 100 or 1,000,000 keys.
// The zero value is an empty map. It is what lets Index publish a new
// snapshot per write without copying the whole index.
type pmap[V any] struct {
	root *hnode[V]
	n    int
}

var pmapSeed = maphash.MakeSeed()

const (
	hBits = 5
	hMask = 1<<hBits - 1
)

type hnode[V any] struct {
	bitmap uint32
	kids   []hslot[V] // one per set bit, in bit order
}

// hslot is either a subtree or a leaf.
type hslot[V any] struct {
	node *hnode[V]
	leaf *hleaf[V]
}

// hleaf holds the keys of one full 64-bit hash (more than one only on a
// hash collision).
type hleaf[V any] struct {
	hash uint64
	kvs  []hkv[V]
}

type hkv[V any] struct {
	key string
	val V
}

// Len is the number of keys.
func (m pmap[V]) Len() int { return m.n }

func (m pmap[V]) get(key string) (V, bool) {
	var zero V
	n := m.root
	if n == nil {
		return zero, false
	}
	h := maphash.String(pmapSeed, key)
	for shift := uint(0); ; shift += hBits {
		bit := uint32(1) << ((h >> shift) & hMask)
		if n.bitmap&bit == 0 {
			return zero, false
		}
		s := &n.kids[bits.OnesCount32(n.bitmap&(bit-1))]
		if s.leaf != nil {
			if s.leaf.hash != h {
				return zero, false
			}
			for i := range s.leaf.kvs {
				if s.leaf.kvs[i].key == key {
					return s.leaf.kvs[i].val, true
				}
			}
			return zero, false
		}
		n = s.node
	}
}

// set returns a map where key maps to val.
func (m pmap[V]) set(key string, val V) pmap[V] {
	h := maphash.String(pmapSeed, key)
	root, added := hset(m.root, 0, h, key, val)
	if added {
		m.n++
	}
	m.root = root
	return m
}

// del returns a map without key.
func (m pmap[V]) del(key string) pmap[V] {
	if m.root == nil {
		return m
	}
	h := maphash.String(pmapSeed, key)
	root, removed := hdel(m.root, 0, h, key)
	if removed {
		m.n--
		m.root = root
	}
	return m
}

// withSlot returns a copy of n with the slot for bit replaced (or inserted).
func (n *hnode[V]) withSlot(bit uint32, s hslot[V]) *hnode[V] {
	var c hnode[V]
	pos := 0
	if n != nil {
		pos = bits.OnesCount32(n.bitmap & (bit - 1))
		c.bitmap = n.bitmap
		if n.bitmap&bit != 0 {
			c.kids = append([]hslot[V](nil), n.kids...)
			c.kids[pos] = s
			return &c
		}
		c.kids = make([]hslot[V], 0, len(n.kids)+1)
		c.kids = append(c.kids, n.kids[:pos]...)
		c.kids = append(c.kids, s)
		c.kids = append(c.kids, n.kids[pos:]...)
	} else {
		c.kids = []hslot[V]{s}
	}
	c.bitmap |= bit
	return &c
}

func hset[V any](n *hnode[V], shift uint, h uint64, key string, val V) (*hnode[V], bool) {
	bit := uint32(1) << ((h >> shift) & hMask)
	if n == nil || n.bitmap&bit == 0 {
		return n.withSlot(bit, hslot[V]{leaf: &hleaf[V]{hash: h, kvs: []hkv[V]{{key, val}}}}), true
	}
	s := n.kids[bits.OnesCount32(n.bitmap&(bit-1))]
	if s.node != nil {
		child, added := hset(s.node, shift+hBits, h, key, val)
		return n.withSlot(bit, hslot[V]{node: child}), added
	}
	if s.leaf.hash == h {
		l := &hleaf[V]{hash: h, kvs: append([]hkv[V](nil), s.leaf.kvs...)}
		for i := range l.kvs {
			if l.kvs[i].key == key {
				l.kvs[i].val = val
				return n.withSlot(bit, hslot[V]{leaf: l}), false
			}
		}
		l.kvs = append(l.kvs, hkv[V]{key, val})
		return n.withSlot(bit, hslot[V]{leaf: l}), true
	}
	nl := &hleaf[V]{hash: h, kvs: []hkv[V]{{key, val}}}
	return n.withSlot(bit, hslot[V]{node: mergeLeaves(s.leaf, nl, shift+hBits)}), true
}

// mergeLeaves builds the subtree holding two leaves of different hashes.
func mergeLeaves[V any](a, b *hleaf[V], shift uint) *hnode[V] {
	ia, ib := (a.hash>>shift)&hMask, (b.hash>>shift)&hMask
	if ia == ib {
		return &hnode[V]{bitmap: 1 << ia, kids: []hslot[V]{{node: mergeLeaves(a, b, shift+hBits)}}}
	}
	if ia > ib {
		a, b, ia, ib = b, a, ib, ia
	}
	return &hnode[V]{bitmap: 1<<ia | 1<<ib, kids: []hslot[V]{{leaf: a}, {leaf: b}}}
}

// hdel removes key under n; the result is nil when n becomes empty. A node
// left with a single leaf is folded into its parent.
func hdel[V any](n *hnode[V], shift uint, h uint64, key string) (*hnode[V], bool) {
	bit := uint32(1) << ((h >> shift) & hMask)
	if n.bitmap&bit == 0 {
		return n, false
	}
	pos := bits.OnesCount32(n.bitmap & (bit - 1))
	s := n.kids[pos]
	var repl hslot[V]
	if s.node != nil {
		child, removed := hdel(s.node, shift+hBits, h, key)
		if !removed {
			return n, false
		}
		if child != nil && len(child.kids) == 1 && child.kids[0].leaf != nil {
			repl = child.kids[0]
		} else if child != nil {
			repl = hslot[V]{node: child}
		}
	} else {
		if s.leaf.hash != h {
			return n, false
		}
		at := -1
		for i := range s.leaf.kvs {
			if s.leaf.kvs[i].key == key {
				at = i
			}
		}
		if at < 0 {
			return n, false
		}
		if len(s.leaf.kvs) > 1 {
			kvs := append(append([]hkv[V](nil), s.leaf.kvs[:at]...), s.leaf.kvs[at+1:]...)
			repl = hslot[V]{leaf: &hleaf[V]{hash: h, kvs: kvs}}
		}
	}
	if repl.node != nil || repl.leaf != nil {
		return n.withSlot(bit, repl), true
	}
	if len(n.kids) == 1 {
		return nil, true
	}
	c := &hnode[V]{bitmap: n.bitmap &^ bit, kids: make([]hslot[V], 0, len(n.kids)-1)}
	c.kids = append(c.kids, n.kids[:pos]...)
	c.kids = append(c.kids, n.kids[pos+1:]...)
	return c, true
}
