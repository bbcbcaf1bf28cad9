package auditlog

import (
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testSigner(t testing.TB) *Signer {
	t.Helper()
	seed := make([]byte, ed25519.SeedSize)
	seed[0] = 7
	return NewSigner(ed25519.NewKeyFromSeed(seed))
}

func keysOf(s *Signer) Keys {
	k := Keys{}
	k.Add(s.Public())
	return k
}

// logOf is n records of partition 0 from offset 0.
func logOf(n int) []Record {
	out := make([]Record, n)
	for i := range out {
		out[i] = Record{Key: []byte(fmt.Sprintf("s%d", i%7)), Value: []byte(fmt.Sprintf(`{"id":"evt_%d"}`, i)),
			Headers: []Header{{Key: []byte("aep-type"), Value: []byte("task.progress")}}, TimestampMs: int64(1000 + i)}
	}
	return out
}

// seal seals recs (offsets from first), writing a checkpoint at every
// anchor and, besides, after each record for which every returns true.
func seal(c *Chain, s *Signer, first int64, recs []Record, every func(i int) bool) []*Checkpoint {
	var out []*Checkpoint
	for i, r := range recs {
		if c.Append(first+int64(i), ContentHash(r), r.TimestampMs) || (every != nil && every(i)) {
			if cp := c.Checkpoint(s); cp != nil {
				out = append(out, cp)
			}
		}
	}
	if cp := c.Checkpoint(s); cp != nil {
		out = append(out, cp)
	}
	return out
}

func logged(recs []Record, first int64) []Logged {
	out := make([]Logged, len(recs))
	for i, r := range recs {
		out[i] = Logged{Offset: first + int64(i), Content: ContentHash(r)}
	}
	return out
}

func stored(cps []*Checkpoint) []Stored {
	out := make([]Stored, len(cps))
	for i, c := range cps {
		// through the wire format, as the verifier reads them
		back, err := ParseCheckpoint(c.Marshal())
		out[i] = Stored{AuditOffset: int64(i), Checkpoint: back, Err: err}
	}
	return out
}

func verifyOne(keys Keys, cps []*Checkpoint, recs []Logged, start, end int64) Report {
	return Verify("t1", keys, []PartitionInput{{Partition: 0, Checkpoints: stored(cps), Records: recs, LogStart: start, LogEnd: end}})
}

func TestUntouchedLogVerifies(t *testing.T) {
	s := testSigner(t)
	recs := logOf(3000)
	cps := seal(NewChain("t1", 0), s, 0, recs, func(i int) bool { return i%333 == 0 })
	rep := verifyOne(keysOf(s), cps, logged(recs, 0), 0, 3000)
	if !rep.OK || rep.Partitions[0].Verified != 3000 || rep.Partitions[0].Unsealed != 0 {
		t.Fatalf("untouched log: %+v", rep)
	}
	// records not sealed yet are counted, not failed
	more := append(logged(recs, 0), Logged{Offset: 3000, Content: ContentHash(Record{Value: []byte("x")})})
	rep = verifyOne(keysOf(s), cps, more, 0, 3001)
	if !rep.OK || rep.Partitions[0].Unsealed != 1 {
		t.Fatalf("unsealed tail: %+v", rep)
	}
}

// Each tampering of the log is found and named at its offset.
func TestTamperedLogsAreNamed(t *testing.T) {
	s := testSigner(t)
	recs := logOf(2500)
	cps := seal(NewChain("t1", 0), s, 0, recs, func(i int) bool { return i%100 == 0 })
	base := logged(recs, 0)
	mod := func(i int, f func(*Record)) []Logged {
		out := append([]Logged(nil), base...)
		r := recs[i]
		r.Headers = append([]Header(nil), r.Headers...)
		f(&r)
		out[i].Content = ContentHash(r)
		return out
	}
	reoffset := func(l []Logged) []Logged {
		for i := range l {
			l[i].Offset = int64(i)
		}
		return l
	}
	dropped := reoffset(append(append([]Logged(nil), base[:1500]...), base[1501:]...))
	swapped := append([]Logged(nil), base...)
	swapped[700].Content, swapped[701].Content = swapped[701].Content, swapped[700].Content
	refill := logOf(5)
	for i := range refill {
		refill[i].Value = []byte(fmt.Sprintf(`{"id":"evt_refill_%d"}`, i))
	}
	inserted := reoffset(append(append(append([]Logged(nil), base[:42]...), Logged{Content: ContentHash(Record{Value: []byte("forged")})}), base[42:]...))
	cases := []struct {
		name   string
		recs   []Logged
		end    int64
		kind   string
		offset int64
	}{
		{"value changed", mod(1234, func(r *Record) { r.Value = []byte(`{"id":"evt_forged"}`) }), 2500, KindModified, 1234},
		{"header changed", mod(99, func(r *Record) { r.Headers[0].Value = []byte("task.done") }), 2500, KindModified, 99},
		{"timestamp changed", mod(5, func(r *Record) { r.TimestampMs++ }), 2500, KindModified, 5},
		{"record dropped", dropped, 2499, KindMissing, 1500},
		{"records swapped", swapped, 2500, KindReordered, 700},
		{"record inserted", inserted, 2501, KindInserted, 42},
		{"truncated", base[:2000], 2000, KindTruncated, 2000},
		{"truncated and refilled", logged(refill, 0), 5, KindModified, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := verifyOne(keysOf(s), cps, c.recs, 0, c.end)
			if rep.OK || len(rep.Findings) == 0 {
				t.Fatalf("tampering not found: %+v", rep.Partitions)
			}
			f := rep.Findings[0]
			if f.Kind != c.kind || f.Offset != c.offset || f.Partition != 0 {
				t.Fatalf("first finding %v, want %s at offset %d (all: %v)", f, c.kind, c.offset, rep.Findings)
			}
		})
	}
}

// Records deleted by retention are counted as expired, not failed; a
// record removed above the log start is a finding.
func TestRetentionIsNotTampering(t *testing.T) {
	s := testSigner(t)
	recs := logOf(3000)
	cps := seal(NewChain("t1", 0), s, 0, recs, nil)
	rep := verifyOne(keysOf(s), cps, logged(recs, 0)[1200:], 1200, 3000)
	if !rep.OK || rep.Partitions[0].Expired != 1200 || rep.Partitions[0].Verified != 1800 {
		t.Fatalf("retention: %+v %v", rep.Partitions, rep.Findings)
	}
	gone := append(logged(recs, 0)[1200:1300:1300], logged(recs, 0)[1301:]...)
	rep = verifyOne(keysOf(s), cps, gone, 1200, 3000)
	if rep.OK || rep.Findings[0].Kind != KindMissing || rep.Findings[0].Offset != 1300 {
		t.Fatalf("a record removed above the log start: %v", rep.Findings)
	}
}

// The audit topic's own tampering: a flipped signature, a dropped anchor,
// a checkpoint from another key.
func TestTamperedCheckpointsAreNamed(t *testing.T) {
	s := testSigner(t)
	recs := logOf(3000)
	cps := seal(NewChain("t1", 0), s, 0, recs, nil)
	if len(cps) != 3 || cps[0].Head.Size != 1024 || cps[2].Head.Size != 3000 {
		t.Fatalf("checkpoints at %v", cps)
	}
	clone := func() []*Checkpoint {
		out := make([]*Checkpoint, len(cps))
		for i, c := range cps {
			cc := *c
			cc.Sig = append([]byte(nil), c.Sig...)
			out[i] = &cc
		}
		return out
	}
	flipped := clone()
	flipped[1].Sig[3] ^= 1
	other := clone()
	o := NewSigner(ed25519.NewKeyFromSeed(make([]byte, 32)))
	other[2].KeyID, other[2].Sig = o.KeyID(), o.Sign(other[2].Head.Text())
	forged := clone()
	forged[2].Head.Root[0] ^= 1
	forged[2].Sig = s.Sign(forged[2].Head.Text()) // signed by the key, but not the leaves' root
	for name, c := range map[string]struct {
		cps  []*Checkpoint
		kind string
	}{
		"signature flipped": {flipped, KindCheckpointSignature},
		"unknown key":       {other, KindCheckpointSignature},
		"anchor dropped":    {[]*Checkpoint{cps[0], cps[2]}, KindCheckpointLeaves},
		"root forged":       {forged, KindCheckpointRoot},
	} {
		rep := verifyOne(keysOf(s), c.cps, logged(recs, 0), 0, 3000)
		if rep.OK || rep.Findings[0].Kind != c.kind {
			t.Errorf("%s: findings %v, want %s first", name, rep.Findings, c.kind)
		}
	}
}

// Two sealers writing at different moments (one restarted from a
// checkpoint, one a zombie that never stopped) sign the same head for
// every size both wrote: heads depend on the records alone.
func TestSealersAgreeOnEveryHead(t *testing.T) {
	s := testSigner(t)
	recs := logOf(5000)
	rng := rand.New(rand.NewPCG(1, 2))
	heads := map[uint64]string{}
	for run := range 20 {
		var cps []*Checkpoint
		c := NewChain("t1", 0)
		p := rng.Float64() / 50
		cut := rng.IntN(len(recs))
		cps = append(cps, seal(c, s, 0, recs[:cut], func(int) bool { return rng.Float64() < p })...)
		if len(cps) > 0 && run%2 == 0 { // a restart from the last checkpoint written
			last := cps[len(cps)-1]
			var err error
			if c, err = RestoreChain(last); err != nil {
				t.Fatal(err)
			}
			cut = int(last.Head.LastOffset + 1)
		}
		cps = append(cps, seal(c, s, int64(cut), recs[cut:], func(int) bool { return rng.Float64() < p })...)
		for _, cp := range cps {
			b := string(cp.Head.Text()) + string(cp.Sig)
			if old, ok := heads[cp.Head.Size]; ok && old != b {
				t.Fatalf("run %d: two different signed heads for size %d", run, cp.Head.Size)
			}
			heads[cp.Head.Size] = b
		}
		if rep := verifyOne(keysOf(s), cps, logged(recs, 0), 0, 5000); !rep.OK {
			t.Fatalf("run %d: %v", run, rep.Findings)
		}
	}
}

// A chain restarted under a truncated and refilled log begins the next
// epoch, linked to the last head; the old epoch's records fail against
// the refilled log.
func TestEpochAfterRestart(t *testing.T) {
	s := testSigner(t)
	old := logOf(50)
	c := NewChain("t1", 0)
	cps := seal(c, s, 0, old, nil)
	if !c.Behind(0) {
		t.Fatal("offset 0 after 50 sealed is not behind")
	}
	c.Restart()
	refill := logOf(60)[50:]
	cps = append(cps, seal(c, s, 0, refill, nil)...)
	if c.Epoch() != 1 || cps[1].Head.Prev != Digest(cps[0].Head.Hash()) {
		t.Fatal("epoch 1 does not name the last head of epoch 0")
	}
	rep := verifyOne(keysOf(s), cps, logged(refill, 0), 0, 10)
	if rep.OK || rep.Findings[0].Offset != 0 || rep.Partitions[0].Epochs != 2 {
		t.Fatalf("refilled log: %+v %v", rep.Partitions, rep.Findings)
	}
}

// An inclusion proof checks with the public key alone, and fails after
// any single bit of it is flipped.
func TestProofFailsAfterAnyBitFlip(t *testing.T) {
	s := testSigner(t)
	recs := logOf(1500)
	cps := seal(NewChain("t1", 0), s, 0, recs, func(i int) bool { return i == 700 })
	p, err := NewProof(cps, 1111, recs[1111])
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Check(keysOf(s)); err != nil {
		t.Fatal(err)
	}
	if _, err := NewProof(cps[:1], 1111, recs[1111]); err != ErrNotSealed {
		t.Fatalf("a record past the last head: %v", err)
	}
	b, err := jsonMarshal(p)
	if err != nil {
		t.Fatal(err)
	}
	// flip every bit of the proof's binary content (record, offset,
	// index, head, signature, path): each flip must fail the check
	flips := 0
	for _, mutate := range proofMutations(p) {
		q := mustProof(t, b)
		mutate(q)
		if q.Check(keysOf(s)) == nil {
			t.Fatalf("a mutated proof checks: %d", flips)
		}
		flips++
	}
	if flips < 1000 {
		t.Fatalf("only %d mutations tried", flips)
	}
}

func TestKeysRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.key")
	s, created, err := LoadOrCreateSigner(path)
	if err != nil || !created {
		t.Fatal(err, created)
	}
	again, created, err := LoadOrCreateSigner(path)
	if err != nil || created || again.KeyID() != s.KeyID() {
		t.Fatal("the key was not kept", err, created)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v", st.Mode())
	}
	fromPEM, err := ParseKeys(MarshalPublicPEM(s.Public()))
	if err != nil || fromPEM[s.KeyID()] == nil {
		t.Fatal(err)
	}
	doc, _ := jsonMarshal(keysOf(s).Doc(s.KeyID()))
	fromDoc, err := ParseKeys(doc)
	if err != nil || fromDoc[s.KeyID()] == nil {
		t.Fatal(err)
	}
	if _, err := ParseKeys([]byte(strings.Replace(string(doc), `"public_key":"`, `"public_key":"AA`, 1))); err == nil {
		t.Fatal("a key whose bytes do not give its id accepted")
	}
}

// When the audit topic's retention deleted the oldest checkpoints, the
// epoch verifies from the oldest kept; with the audit topic whole, the
// same gap is a finding (someone removed checkpoints).
func TestAuditRetentionVerifiesFromTheOldestKept(t *testing.T) {
	s := testSigner(t)
	recs := logOf(3000)
	cps := seal(NewChain("t1", 0), s, 0, recs, func(i int) bool { return i%500 == 0 })
	kept := cps[3:]
	in := PartitionInput{Partition: 0, Checkpoints: stored(kept), Records: logged(recs, 0), LogStart: 0, LogEnd: 3000, AuditStart: 3}
	rep := Verify("t1", keysOf(s), []PartitionInput{in})
	p := rep.Partitions[0]
	if !rep.OK || p.Expired != kept[0].LeavesFrom+uint64(len(kept[0].Offsets)) || p.Verified+p.Expired != 3000 {
		t.Fatalf("audit retention: %+v %v", p, rep.Findings)
	}
	in.AuditStart = 0
	if rep := Verify("t1", keysOf(s), []PartitionInput{in}); rep.OK || rep.Findings[0].Kind != KindCheckpointLeaves {
		t.Fatalf("checkpoints removed from a whole audit topic: %v", rep.Findings)
	}
	// a record altered after the oldest kept checkpoint is still found
	in.AuditStart = 3
	in.Records = append([]Logged(nil), in.Records...)
	in.Records[2900].Content[0] ^= 1
	if rep := Verify("t1", keysOf(s), []PartitionInput{in}); rep.OK || rep.Findings[0].Offset != 2900 {
		t.Fatalf("altered record after audit retention: %v", rep.Findings)
	}
}

// BenchmarkSealRecord is the sealer's work per record: the content hash of
// a typical event record (~400 bytes, 10 routing headers), the leaf, the
// frontier, and the checkpoint signed every 1024 records (amortized).
func BenchmarkSealRecord(b *testing.B) {
	s := testSigner(b)
	r := Record{Key: []byte("sess_0042"), Value: []byte(strings.Repeat("x", 400)), TimestampMs: 1}
	for i := range 10 {
		r.Headers = append(r.Headers, Header{Key: []byte(fmt.Sprintf("aep-h%d", i)), Value: []byte("agent:researcher")})
	}
	c := NewChain("t1", 0)
	b.ReportAllocs()
	off := int64(0)
	for b.Loop() {
		if c.Append(off, ContentHash(r), 1) {
			_ = c.Checkpoint(s).Marshal()
		}
		off++
	}
}

// The content hash is the format docs/audit.md writes down: built here by
// hand from its description, and pinned.
func TestContentHashIsTheDocumentedBytes(t *testing.T) {
	r := Record{Key: []byte("s1"), Value: []byte(`{"id":"e1"}`), Headers: []Header{{Key: []byte("aep-id"), Value: []byte("e1")}}, TimestampMs: 1700000000000}
	var b []byte
	u := func(n uint64) {
		b = append(b, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	lv := func(v []byte) { u(uint64(len(v))); b = append(b, v...) }
	b = append(b, "aep-audit-record/v1\x00"...)
	lv(r.Key)
	lv(r.Value)
	u(1)
	lv(r.Headers[0].Key)
	lv(r.Headers[0].Value)
	u(uint64(r.TimestampMs))
	got := ContentHash(r)
	if got != sha256.Sum256(b) {
		t.Fatal("the content hash is not SHA-256 of the documented bytes")
	}
	if fmt.Sprintf("%x", got) != pinnedContentHash {
		t.Fatalf("content hash %x changed: every sealed log would fail to verify", got)
	}
}

const pinnedContentHash = "f03e8efe0ea3ce2e284ca10b53066fb90d28844f1b395cfdceaea1d8490e12f4"
