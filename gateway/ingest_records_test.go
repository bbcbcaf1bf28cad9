package gateway

import (
	"testing"

	"github.com/aep-gateway/aep-gateway/aep"
)

// Records alias the event bytes only when the request owns them; bytes lent
// by a caller (Server.Ingest) are copied, so the caller may reuse them while
// Kafka still holds an unacknowledged record.
func TestRecordsAliasOnlyOwnedBytes(t *testing.T) {
	raw := []byte(dEvent(1, "s1"))
	a, err := aep.ParseAs(aep.DialectD, raw, aep.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	in := &ingestor{}
	for _, owned := range []bool{true, false} {
		buf := append([]byte(nil), raw...)
		outs := []outcome{{frame: frame{raw: buf}, attrs: a}, {frame: frame{raw: []byte("x")}, parseErr: &aep.Error{}}}
		recs, idx := in.records("t", outs, owned)
		if len(recs) != 1 || idx[0] != 0 || string(recs[0].Value) != string(raw) || recs[0].Topic != "t" {
			t.Fatalf("owned %v: records %+v, idx %v", owned, recs, idx)
		}
		if len(recs[0].Headers) == 0 || recs[0].Key == nil {
			t.Fatalf("owned %v: no headers or a null key: %+v", owned, recs[0])
		}
		buf[0] = '!'
		if aliased := recs[0].Value[0] == '!'; aliased != owned {
			t.Errorf("owned %v: value aliases the event bytes: %v", owned, aliased)
		}
	}
}
