package gateway

import (
	"bytes"
	"net/http"
	"strings"
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
		recs, idx := in.records("t", publisher{via: "http"}, outs, owned, new(recBufs))
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

// A body larger than readBody presizes from its Content-Length is read
// whole the other way, every event written with the bytes it was sent with.
func TestIngestBodyOverPresizedBound(t *testing.T) {
	g := newTestGateway(t, nil)
	var body []byte
	pad := strings.Repeat("x", 1200)
	for i := 0; i < 1000; i++ {
		ev := strings.Replace(rEvent("s1", i), `"data":{"tool":{"name":"Bash"}}`, `"data":{"pad":"`+pad+`"}`, 1)
		body = append(append(body, ev...), '\n')
	}
	if len(body) <= maxPresizedBody {
		t.Fatalf("body of %d bytes does not exceed the presized bound", len(body))
	}
	resp := g.postR("application/x-ndjson", body)
	if resp.status != http.StatusAccepted {
		t.Fatalf("status %d: %s", resp.status, resp.body)
	}
	recs := g.readAll("aep.default.events", 1000)
	want := map[string]bool{}
	for _, l := range bytes.Split(bytes.TrimSpace(body), []byte("\n")) {
		want[string(l)] = true
	}
	for _, r := range recs {
		if !want[string(r.Value)] {
			t.Fatalf("record value not among the events sent: %.80s", r.Value)
		}
	}
	if len(recs) != 1000 {
		t.Fatalf("%d records, want 1000", len(recs))
	}
}
