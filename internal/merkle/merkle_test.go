package merkle

import (
	"encoding/hex"
	"strconv"
	"testing"
)

func leaves(n int) []Hash {
	out := make([]Hash, n)
	for i := range out {
		out[i] = LeafHash([]byte("leaf " + strconv.Itoa(i)))
	}
	return out
}

// The tree heads of RFC 6962's test vectors (the data of the reference
// implementation's tests, hashed the same way RFC 9162 does): the empty
// tree, and the 8 leaves "", 00, 10, 2021, 3031, 40414243,
// 5051525354555657, 606162636465666768696a6b6c6d6e6f (hex).
func TestRootsOfTheReferenceVectors(t *testing.T) {
	if hex.EncodeToString(EmptyRoot[:]) != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Fatalf("empty root %x", EmptyRoot)
	}
	data := []string{"", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"}
	want := []string{
		"6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
		"fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
		"aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
		"d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
		"4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
		"76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
		"ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
		"5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
	}
	var f Frontier
	var ls []Hash
	for i, d := range data {
		raw, _ := hex.DecodeString(d)
		ls = append(ls, LeafHash(raw))
		f.Append(ls[i])
		if got := f.Root(); hex.EncodeToString(got[:]) != want[i] {
			t.Errorf("frontier root of %d leaves %x, want %s", i+1, got, want[i])
		}
		if got := Root(ls); hex.EncodeToString(got[:]) != want[i] {
			t.Errorf("root of %d leaves %x, want %s", i+1, got, want[i])
		}
	}
}

// Every leaf of every tree up to 70 leaves has an inclusion proof that
// verifies, and that fails for another leaf or index, against the head of
// another size, and with any one proof hash changed. (A proof checks a
// (size, root) pair as a signed head gives them: a wrong size with the
// right root is not what it guards against.)
func TestInclusionProofs(t *testing.T) {
	all := leaves(70)
	for n := 1; n <= len(all); n++ {
		ls := all[:n]
		root := Root(ls)
		for i := range n {
			p, err := InclusionProof(ls, i)
			if err != nil {
				t.Fatal(err)
			}
			if !VerifyInclusion(ls[i], uint64(i), uint64(n), p, root) {
				t.Fatalf("n=%d i=%d: the proof does not verify", n, i)
			}
			if VerifyInclusion(all[n%len(all)], uint64(i), uint64(n), p, root) && all[n%len(all)] != ls[i] {
				t.Fatalf("n=%d i=%d: another leaf verifies", n, i)
			}
			if n > 1 && VerifyInclusion(ls[i], uint64((i+1)%n), uint64(n), p, root) {
				t.Fatalf("n=%d i=%d: another index verifies", n, i)
			}
			if n < len(all) && VerifyInclusion(ls[i], uint64(i), uint64(n+1), p, Root(all[:n+1])) {
				t.Fatalf("n=%d i=%d: the head of size %d verifies", n, i, n+1)
			}
			for j := range p {
				bad := append([]Hash(nil), p...)
				bad[j][0] ^= 1
				if VerifyInclusion(ls[i], uint64(i), uint64(n), bad, root) {
					t.Fatalf("n=%d i=%d: a proof with hash %d flipped verifies", n, i, j)
				}
			}
		}
	}
}

// Every pair of sizes m <= n up to 40 has a consistency proof that
// verifies, and that fails against another old or new head or with a
// changed hash.
func TestConsistencyProofs(t *testing.T) {
	all := leaves(40)
	for n := 1; n <= len(all); n++ {
		rootN := Root(all[:n])
		for m := 1; m <= n; m++ {
			rootM := Root(all[:m])
			p, err := ConsistencyProof(all[:n], m)
			if err != nil {
				t.Fatal(err)
			}
			if !VerifyConsistency(uint64(m), uint64(n), rootM, rootN, p) {
				t.Fatalf("m=%d n=%d: the proof does not verify", m, n)
			}
			if m < n {
				if VerifyConsistency(uint64(m), uint64(n), rootN, rootN, p) || VerifyConsistency(uint64(m), uint64(n), rootM, rootM, p) {
					t.Fatalf("m=%d n=%d: verifies against a wrong head", m, n)
				}
				for j := range p {
					bad := append([]Hash(nil), p...)
					bad[j][31] ^= 0x80
					if VerifyConsistency(uint64(m), uint64(n), rootM, rootN, bad) {
						t.Fatalf("m=%d n=%d: a proof with hash %d flipped verifies", m, n, j)
					}
				}
			}
		}
	}
	// A tree that is not an extension: one early leaf changed.
	changed := append([]Hash(nil), all...)
	changed[3] = LeafHash([]byte("tampered"))
	p, _ := ConsistencyProof(changed[:20], 10)
	if VerifyConsistency(10, 20, Root(all[:10]), Root(changed[:20]), p) {
		t.Fatal("a rewritten history verifies as consistent")
	}
}

// The frontier's root equals the recomputed root at every size, and a
// clone goes on independently.
func TestFrontierMatchesRecomputation(t *testing.T) {
	all := leaves(300)
	var f Frontier
	for i, l := range all {
		f.Append(l)
		if f.Root() != Root(all[:i+1]) || f.Size() != uint64(i+1) {
			t.Fatalf("size %d: frontier root differs", i+1)
		}
	}
	c := f.Clone()
	c.Append(LeafHash([]byte("x")))
	if f.Root() != Root(all) || c.Size() != f.Size()+1 {
		t.Fatal("the clone shares state")
	}
}

func BenchmarkFrontierAppend(b *testing.B) {
	l := LeafHash([]byte("leaf"))
	var f Frontier
	b.ReportAllocs()
	for b.Loop() {
		f.Append(l)
	}
}

// A frontier restored from its peaks goes on as the original; peaks that
// cannot be a frontier of the size are refused.
func TestFrontierRestoredFromPeaks(t *testing.T) {
	all := leaves(300)
	var f Frontier
	for _, l := range all[:137] {
		f.Append(l)
	}
	r, err := NewFrontier(f.Size(), f.Peaks())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range all[137:] {
		r.Append(l)
	}
	if r.Root() != Root(all) {
		t.Fatal("restored frontier's root differs")
	}
	if _, err := NewFrontier(f.Size()+2, f.Peaks()); err == nil {
		t.Fatal("size 139 with the peaks of 137 accepted")
	}
	if _, err := NewFrontier(0, nil); err != nil {
		t.Fatal(err)
	}
}

// A path streamed through PathRanges equals InclusionProof for every
// index of every size up to 70.
func TestStreamedPathEqualsInclusionProof(t *testing.T) {
	all := leaves(70)
	for n := 1; n <= len(all); n++ {
		for i := range n {
			want, err := InclusionProof(all[:n], i)
			if err != nil {
				t.Fatal(err)
			}
			p, err := NewPath(uint64(i), uint64(n))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Proof(); n > 1 && err == nil {
				t.Fatalf("size %d index %d: a proof before any leaf", n, i)
			}
			for j, l := range all[:n] {
				if err := p.Add(uint64(j), l); err != nil {
					t.Fatal(err)
				}
			}
			got, err := p.Proof()
			if err != nil || len(got) != len(want) {
				t.Fatalf("size %d index %d: %v, %d hashes want %d", n, i, err, len(got), len(want))
			}
			for k := range got {
				if got[k] != want[k] {
					t.Fatalf("size %d index %d: hash %d differs", n, i, k)
				}
			}
		}
	}
	if p, _ := NewPath(0, 4); p.Add(1, all[1]) == nil {
		t.Fatal("a leaf out of order accepted")
	}
}
