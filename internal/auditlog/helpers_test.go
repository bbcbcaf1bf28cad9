package auditlog

import (
	"encoding/json"
	"testing"
)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func mustProof(t *testing.T, b []byte) *Proof {
	t.Helper()
	var p Proof
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// proofMutations flips each bit of a proof's bytes, one mutation each.
func proofMutations(p *Proof) []func(*Proof) {
	var out []func(*Proof)
	bits := func(n int, get func(*Proof) []byte) {
		for i := range n * 8 {
			out = append(out, func(q *Proof) { get(q)[i/8] ^= 1 << (i % 8) })
		}
	}
	bits(len(p.Record.Value), func(q *Proof) []byte { return q.Record.Value })
	bits(len(p.Record.Key), func(q *Proof) []byte { return q.Record.Key })
	bits(len(p.Record.Headers[0].Value), func(q *Proof) []byte { return q.Record.Headers[0].Value })
	bits(len(p.Sig), func(q *Proof) []byte { return q.Sig })
	bits(32, func(q *Proof) []byte { return q.Head.Root[:] })
	for j := range p.AuditPath {
		bits(32, func(q *Proof) []byte { return q.AuditPath[j][:] })
	}
	for i := range 64 {
		out = append(out,
			func(q *Proof) { q.Offset ^= 1 << i },
			func(q *Proof) { q.Index ^= 1 << i },
			func(q *Proof) { q.Record.TimestampMs ^= 1 << i },
			func(q *Proof) { q.Head.Size ^= 1 << i })
	}
	return out
}
