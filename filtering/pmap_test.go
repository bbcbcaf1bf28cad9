package filtering

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestPmap checks the persistent map against a Go map under random sets
// and deletes, and that older versions are unaffected by later writes.
func TestPmap(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var m pmap[int]
	model := map[string]int{}
	type version struct {
		m     pmap[int]
		model map[string]int
	}
	var versions []version
	for i := 0; i < 20000; i++ {
		k := strconv.Itoa(r.IntN(3000))
		if r.IntN(3) == 0 {
			m = m.del(k)
			delete(model, k)
		} else {
			m = m.set(k, i)
			model[k] = i
		}
		if m.Len() != len(model) {
			t.Fatalf("step %d: Len %d, want %d", i, m.Len(), len(model))
		}
		if i%2000 == 0 {
			c := make(map[string]int, len(model))
			for k, v := range model {
				c[k] = v
			}
			versions = append(versions, version{m, c})
		}
	}
	versions = append(versions, version{m, model})
	for vi, v := range versions {
		for j := 0; j < 3000; j++ {
			k := strconv.Itoa(j)
			got, ok := v.m.get(k)
			want, wok := v.model[k]
			if ok != wok || got != want {
				t.Fatalf("version %d key %s: got %d,%v want %d,%v", vi, k, got, ok, want, wok)
			}
		}
	}
	for k := range model {
		m = m.del(k)
	}
	if m.Len() != 0 || m.root != nil {
		t.Fatalf("emptied map: Len %d root %v", m.Len(), m.root)
	}
}

// TestPmapCollisions forces full-hash collisions through the leaf lists by
// building leaves directly.
func TestPmapCollisions(t *testing.T) {
	var m pmap[int]
	m = m.set("a", 1)
	// Rewrite the single leaf's key list to simulate a collision: two keys
	// under one hash.
	l := m.root.kids[0].leaf
	l.kvs = append(l.kvs, hkv[int]{key: "b", val: 2})
	m.n = 2
	if v, ok := m.get("a"); !ok || v != 1 {
		t.Fatal("a lost")
	}
	// "b" hashes elsewhere, so get goes by hash; set and del on the
	// colliding key "a" keep "b" in the leaf.
	m2 := m.set("a", 3)
	if len(m2.root.kids[0].leaf.kvs) != 2 || m2.n != 2 {
		t.Fatalf("replace in collision leaf: %+v", m2.root.kids[0].leaf.kvs)
	}
	m3 := m2.del("a")
	if m3.n != 1 || m3.root == nil || len(m3.root.kids[0].leaf.kvs) != 1 || m3.root.kids[0].leaf.kvs[0].key != "b" {
		t.Fatalf("delete in collision leaf")
	}
}
