package filtering

import (
	"hash/maphash"
)

// nShards is the fan-out of a hashed field. A write copies the shard array
// (nShards pointers) and one shard map, so the cost of subscribing grows
// with subscriptions/nShards, not with subscriptions.
const nShards = 512

// shardedMap maps an exact attribute value to the entries anchored on it.
// It is immutable once published: writers build a modified copy.
type shardedMap struct {
	seed   maphash.Seed
	shards [nShards]map[string][]*entry
	keys   int
}

func newShardedMap(seed maphash.Seed) *shardedMap {
	return &shardedMap{seed: seed}
}

func (m *shardedMap) shard(key string) int {
	return int(maphash.String(m.seed, key) % nShards)
}

// get returns the entries anchored on key. It never allocates.
func (m *shardedMap) get(key string) []*entry {
	s := m.shards[m.shard(key)]
	if s == nil {
		return nil
	}
	return s[key]
}

// with returns a copy of m where e is anchored on key.
func (m *shardedMap) with(key string, e *entry) *shardedMap {
	n := *m
	i := m.shard(key)
	old := m.shards[i]
	s := make(map[string][]*entry, len(old)+1)
	for k, v := range old {
		s[k] = v
	}
	list := old[key]
	if len(list) == 0 {
		n.keys++
	}
	// Appending may write past the length that older snapshots read,
	// never within it: safe for readers of those snapshots.
	s[key] = append(list, e)
	n.shards[i] = s
	return &n
}

// without returns a copy of m where e is no longer anchored on key, or nil
// when m becomes empty.
func (m *shardedMap) without(key string, e *entry) *shardedMap {
	i := m.shard(key)
	old := m.shards[i]
	list := old[key]
	rest := removeEntry(list, e)
	if len(rest) == len(list) {
		return m
	}
	n := *m
	s := make(map[string][]*entry, len(old))
	for k, v := range old {
		s[k] = v
	}
	if len(rest) == 0 {
		delete(s, key)
		n.keys--
	} else {
		s[key] = rest
	}
	if len(s) == 0 {
		s = nil
	}
	n.shards[i] = s
	if n.keys == 0 {
		return nil
	}
	return &n
}

// removeEntry returns a fresh slice without e (or list itself when e is not
// in it). Published slices are never modified in place.
func removeEntry(list []*entry, e *entry) []*entry {
	at := -1
	for i, x := range list {
		if x == e {
			at = i
			break
		}
	}
	if at < 0 {
		return list
	}
	if len(list) == 1 {
		return nil
	}
	out := make([]*entry, 0, len(list)-1)
	out = append(out, list[:at]...)
	return append(out, list[at+1:]...)
}
