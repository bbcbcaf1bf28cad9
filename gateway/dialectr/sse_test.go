package dialectr_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/aep-gateway/aep-gateway/gateway/dialectr"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

type pos struct {
	epoch, seq int
}

// session writes a session's events (epochs 0 and 1, four seqs each) with
// another session's events between them, in several batches, and returns
// the session's events by position order with their bytes.
func (e *env) session(name, other string) ([]pos, map[pos]string) {
	e.t.Helper()
	var order []pos
	raw := map[pos]string{}
	var batch []string
	n := 0
	for epoch := 0; epoch < 2; epoch++ {
		for seq := 0; seq < 4; seq++ {
			p := pos{epoch, seq}
			ev := rEvent(fmt.Sprintf("%s-%d-%d", name, epoch, seq), name, epoch, seq)
			order = append(order, p)
			raw[p] = ev
			batch = append(batch, ev, rEvent(fmt.Sprintf("%s-%d", other, n), other, 0, n))
			n++
			if len(batch) >= 6 {
				e.post(batch...)
				batch = nil
			}
		}
	}
	if len(batch) > 0 {
		e.post(batch...)
	}
	return order, raw
}

// expectMarker posts an event of a session nobody resumes and requires it
// to be the stream's next event: nothing was left over before it.
func expectMarker(e *env, c *sseClient, k int) {
	e.t.Helper()
	ev := rEvent(fmt.Sprintf("marker-%d", k), "s-marker", 0, k)
	e.post(ev)
	m := c.nextEvent()
	if m.Data != ev {
		e.t.Fatalf("after the tail got %q, want the live marker %q", m.Data, ev)
	}
	if want := fmt.Sprintf("s-marker:0:%d", k); m.ID != want {
		e.t.Fatalf("marker id %q, want %q", m.ID, want)
	}
}

func TestSSEResumeFromEveryPosition(t *testing.T) {
	e := newEnv(t, nil)
	// The other session shares s-a's partition: its events lie between
	// s-a's in the stretch the resume reads, and must not come out.
	order, raw := e.session("s-a", colocated("s-a", "s-b"))
	for i, from := range order {
		t.Run(fmt.Sprintf("after %d:%d", from.epoch, from.seq), func(t *testing.T) {
			c := e.getSSE(nil, map[string]string{"Last-Event-ID": fmt.Sprintf("s-a:%d:%d", from.epoch, from.seq)})
			for _, p := range order[i+1:] {
				m := c.nextEvent()
				if m.Data != raw[p] {
					t.Fatalf("got %q, want %q", m.Data, raw[p])
				}
				if want := fmt.Sprintf("s-a:%d:%d", p.epoch, p.seq); m.ID != want || m.Event != "tool.requested" {
					t.Fatalf("id %q event %q, want %q tool.requested", m.ID, m.Event, want)
				}
			}
			expectMarker(e, c, i)
		})
	}
}

func TestSSEFromSeveralSessions(t *testing.T) {
	e := newEnv(t, nil)
	// s-b shares s-a's partition: reading starts at the lower resolved
	// offset, and s-a's events at or before its position lie above it.
	sb := colocated("s-a", "s-b")
	orderB, rawB := e.session(sb, "s-y")
	orderA, rawA := e.session("s-a", "s-x")
	from := fmt.Sprintf(`[{"session":"s-a","epoch":0,"seq":2},{"session":%q,"epoch":1,"seq":0},{"session":"s-a","epoch":1,"seq":3}]`, sb)
	// from wins over Last-Event-ID; s-a's earliest position wins.
	c := e.getSSE(url.Values{"from": {from}}, map[string]string{"Last-Event-ID": "s-x:0:0"})
	want := map[string][]string{}
	for _, p := range orderA[3:] {
		want["s-a"] = append(want["s-a"], rawA[p])
	}
	for _, p := range orderB[5:] {
		want[sb] = append(want[sb], rawB[p])
	}
	got := map[string][]string{}
	for range len(want["s-a"]) + len(want[sb]) {
		m := c.nextEvent()
		s, _, _ := strings.Cut(m.ID, ":")
		got[s] = append(got[s], m.Data)
	}
	for s := range want {
		if fmt.Sprint(got[s]) != fmt.Sprint(want[s]) {
			t.Errorf("session %s: got %d events %q, want %d %q", s, len(got[s]), got[s], len(want[s]), want[s])
		}
	}
	expectMarker(e, c, 0)
}

func TestSSELiveByteIdenticalAndIDs(t *testing.T) {
	e := newEnv(t, nil)
	c := e.getSSE(url.Values{"filter": {`{"type":["tool.*","agent.*"]}`}}, nil)
	sess := rEvent("live-1", "s-live", 3, 7)
	// Agent-scoped: no session, no seq: no id line.
	agent := `{"aep":"0.1","id":"live-2","type":"agent.heartbeat","time":"2026-07-03T10:14:00.000Z","source":"aep://host-a/agent/claude-code","agent":"claude-code","data":{}}`
	e.post(sess, agent)
	// The two events live on different partitions: no order between them.
	got := map[string]gatewaytest.SSEMessage{}
	for range 2 {
		m := c.nextEvent()
		got[m.Event] = m
	}
	if m := got["tool.requested"]; m.Data != sess || m.ID != "s-live:3:7" {
		t.Fatalf("session-scoped event: got %+v", m)
	}
	if m := got["agent.heartbeat"]; m.Data != agent || m.HasID {
		t.Fatalf("agent-scoped event: got %+v, want no id", m)
	}
}

func TestSSEFilterApplies(t *testing.T) {
	e := newEnv(t, nil)
	c := e.getSSE(url.Values{"filter": {`{"session":["s-keep"]}`}}, nil)
	e.post(rEvent("d-1", "s-drop", 0, 0), rEvent("k-1", "s-keep", 0, 0))
	if m := c.nextEvent(); m.ID != "s-keep:0:0" {
		t.Fatalf("got %+v, want only s-keep", m)
	}
}

func TestSSEPing(t *testing.T) {
	e := newEnv(t, func(c *dialectr.Config) { c.Ping = 20 * time.Millisecond })
	c := e.getSSE(nil, nil)
	if m := c.Next(); m.Comment() != "ping" {
		t.Fatalf("got %+v, want : ping", m)
	}
}

func TestSSERefusals(t *testing.T) {
	e := newEnv(t, nil)
	type tc struct {
		name   string
		query  url.Values
		hdr    map[string]string
		status int
		code   string
	}
	cases := []tc{
		{"malformed filter", url.Values{"filter": {`{"type":`}}, nil, 400, "invalid-filter"},
		{"inner wildcard", url.Values{"filter": {`{"type":["tool.*.progress"]}`}}, nil, 400, "invalid-filter"},
		{"bad capture", url.Values{"capture": {"secret"}}, nil, 400, "invalid-filter"},
		{"from ALL is not all", url.Values{"from": {"ALL"}}, nil, 400, "invalid-filter"},
		{"from not an array", url.Values{"from": {`{"session":"s"}`}}, nil, 400, "invalid-filter"},
		{"from without seq", url.Values{"from": {`[{"session":"s","epoch":0}]`}}, nil, 400, "invalid-filter"},
		{"from negative seq", url.Values{"from": {`[{"session":"s","seq":-1}]`}}, nil, 400, "invalid-filter"},
		{"from empty session", url.Values{"from": {`[{"session":"","seq":1}]`}}, nil, 400, "invalid-filter"},
		{"bad Last-Event-ID", nil, map[string]string{"Last-Event-ID": "no-colons"}, 400, "invalid-filter"},
		{"too many positions", url.Values{"from": {tooMany(65)}}, nil, 413, "limit-exceeded"},
	}
	// The R conformance corpus's invalid filters (AEP-0003 §6): fail closed.
	var fx struct {
		Invalid []struct {
			Name   string          `json:"name"`
			Filter json.RawMessage `json:"filter"`
		} `json:"invalid"`
	}
	b, err := os.ReadFile("../../filtering/testdata/attr-match-cases.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &fx); err != nil || len(fx.Invalid) == 0 {
		t.Fatalf("fixture: %v", err)
	}
	for _, f := range fx.Invalid {
		cases = append(cases, tc{"fixture " + f.Name, url.Values{"filter": {string(f.Filter)}}, nil, 400, "invalid-filter"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, cancel := e.rawSSE(c.query, c.hdr)
			defer cancel()
			body, _ := io.ReadAll(resp.Body)
			var got struct{ Error, Detail string }
			_ = json.Unmarshal(body, &got)
			if resp.StatusCode != c.status || got.Error != c.code || got.Detail == "" {
				t.Fatalf("got %d %s, want %d %s", resp.StatusCode, body, c.status, c.code)
			}
		})
	}
}

func tooMany(n int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"session":"s-%d","epoch":0,"seq":0}`, i)
	}
	return b.String() + "]"
}

func TestSSEMethodAndAccept(t *testing.T) {
	e := newEnv(t, nil)
	resp, err := http.Post(e.url+"/stream", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST /stream: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, e.url+"/stream", nil)
	req.Header.Set("Accept", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotAcceptable {
		t.Fatalf("Accept: application/json: %d", resp.StatusCode)
	}
}

// colocated returns a session name starting with prefix whose events land
// on the same partition of the 4-partition test topic as session's.
func colocated(session, prefix string) string {
	want := partitioning.Partition([]byte(session), 4)
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if partitioning.Partition([]byte(name), 4) == want {
			return name
		}
	}
}

// A position whose successor retention deleted: the replay-exhausted
// comment first, naming the earliest position still held, then what is held.
func TestSSEReplayExhausted(t *testing.T) {
	e := newEnv(t, nil)
	e.getSSE(nil, nil).Close() // starts the tenant's indexer
	order, raw := e.session("s-a", colocated("s-a", "s-b"))
	last := e.record("s-a-1-3")
	e.waitIndexed(last.Partition, last.Offset+1)
	r := e.record("s-a-0-3")
	ctx := context.Background()
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: r.Topic, Partition: r.Partition, At: r.Offset})
	if _, err := e.adm.DeleteRecords(ctx, offs); err != nil {
		t.Fatal(err)
	}
	c := e.getSSE(nil, map[string]string{"Last-Event-ID": "s-a:0:0"})
	if m := c.Next(); m.Comment() != "replay-exhausted s-a 0:3" {
		t.Fatalf("first after stream open: %+v, want the comment replay-exhausted s-a 0:3", m)
	}
	for _, p := range order[3:] {
		if m := c.nextEvent(); m.Data != raw[p] {
			t.Fatalf("got %q, want %q", m.Data, raw[p])
		}
	}
	expectMarker(e, c, 0)
	// A position still held resumes without a marker.
	c = e.getSSE(nil, map[string]string{"Last-Event-ID": "s-a:1:0"})
	if len(c.exhausted) != 0 {
		t.Fatalf("markers %q for a held position", c.exhausted)
	}
	for _, p := range order[5:] {
		if m := c.nextEvent(); m.Data != raw[p] {
			t.Fatalf("got %q, want %q", m.Data, raw[p])
		}
	}
}

// An emitter's retry (same source and id) in the replayed stretch goes out
// once.
func TestSSEReplayDedupes(t *testing.T) {
	e := newEnv(t, nil)
	ev0, ev1, ev2 := rEvent("d-0", "s-d", 0, 0), rEvent("d-1", "s-d", 0, 1), rEvent("d-2", "s-d", 0, 2)
	e.post(ev0, ev1, ev2)
	e.post(ev1, ev2) // retried after a lost response
	c := e.getSSE(nil, map[string]string{"Last-Event-ID": "s-d:0:0"})
	for _, want := range []string{ev1, ev2} {
		if m := c.nextEvent(); m.Data != want {
			t.Fatalf("got %q, want %q", m.Data, want)
		}
	}
	expectMarker(e, c, 0)
}

// from=all replays every session the log holds, each from its earliest
// held event (agent-scoped events are not session buffers), then goes
// live; no replay-exhausted even though retention deleted a session's start.
func TestSSEReplayAll(t *testing.T) {
	e := newEnv(t, nil)
	sb := elsewhere("s-a", "s-b")
	order, rawA := e.session("s-a", colocated("s-a", "s-c"))
	_, rawB := e.session(sb, elsewhere("s-a", "s-d"))
	agent := `{"aep":"0.1","id":"ag-1","type":"agent.heartbeat","time":"2026-07-03T10:14:00.000Z","source":"aep://host-a/agent/claude-code","agent":"claude-code","data":{}}`
	e.post(agent)
	e.deleteBefore(e.record("s-a-0-1"))
	c := e.getSSE(url.Values{"from": {"all"}, "filter": {`{"type":["tool.*","agent.*"]}`}}, nil)
	if len(c.exhausted) != 0 {
		t.Fatalf("replay-all sent %q", c.exhausted)
	}
	want := map[string][]string{}
	for _, p := range order {
		if p != (pos{0, 0}) {
			want["s-a"] = append(want["s-a"], rawA[p])
		}
		want[sb] = append(want[sb], rawB[p])
	}
	got := map[string][]string{}
	total := 0
	for _, w := range want {
		total += len(w)
	}
	total += 7 + 8 // s-c lost its first event with s-a's; s-d kept all
	for range total {
		m := c.nextEvent()
		if !m.HasID {
			t.Fatalf("agent-scoped event replayed: %+v", m)
		}
		s, _, _ := strings.Cut(m.ID, ":")
		got[s] = append(got[s], m.Data)
	}
	for s, w := range want {
		if fmt.Sprint(got[s]) != fmt.Sprint(w) {
			t.Errorf("%s: got %d events %q, want %d %q", s, len(got[s]), got[s], len(w), w)
		}
	}
	expectMarker(e, c, 0)
}

// elsewhere returns a session name starting with prefix whose events land
// on another partition than session's.
func elsewhere(session, prefix string) string {
	avoid := partitioning.Partition([]byte(session), 4)
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if partitioning.Partition([]byte(name), 4) != avoid {
			return name
		}
	}
}
