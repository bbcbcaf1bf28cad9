package dialectr_test

import (
	"context"
	"encoding/json"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// produceAt writes a dialect R event straight to the tenant topic with the
// record timestamp at, as the gateway would have written it then.
func (e *env) produceAt(raw string, at time.Time) {
	e.t.Helper()
	a, err := aep.Parse([]byte(raw), aep.Limits{})
	if err != nil {
		e.t.Fatal(err)
	}
	r := &kgo.Record{Topic: "aep.default.events", Partition: partitioning.Partition([]byte(a.Session), 4), Key: []byte(a.Session),
		Value: []byte(raw), Headers: partitioning.AppendHeaders(nil, &a), Timestamp: at}
	// A client of its own: a record deadline would count from the old
	// timestamp.
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

// TestSSESince: since=10m replays the events of every session the log got
// in the last ten minutes, in session order, and not the older ones; with
// live=0 the stream then ends.
func TestSSESince(t *testing.T) {
	e := newEnv(t, nil)
	// s-b's first event creates the topic, on another partition than the
	// hour-old events of s-a and s-old written next.
	sb, sold := elsewhere("s-a", "s-b"), colocated("s-a", "s-old")
	recent := []string{rEvent("b-0-0", sb, 0, 0)}
	e.post(recent[0])
	e.produceAt(rEvent("old-1", sold, 0, 0), time.Now().Add(-time.Hour))
	e.produceAt(rEvent("a-0-0", "s-a", 0, 0), time.Now().Add(-time.Hour))
	more := []string{rEvent("a-0-1", "s-a", 0, 1), rEvent("b-0-1", sb, 0, 1), rEvent("a-0-2", "s-a", 0, 2)}
	e.post(more...)
	recent = append(recent, more...)
	c := e.getSSE(url.Values{"since": {"10m"}, "live": {"0"}}, nil)
	var got []string
	for {
		m := c.NextSkipping("ping")
		if strings.HasPrefix(m.Comment(), "closing") {
			break
		}
		if len(m.Comments) > 0 {
			t.Fatalf("unexpected comment %q", m.Comment())
		}
		got = append(got, m.Data)
	}
	if len(got) != len(recent) {
		t.Fatalf("since=10m replayed %d events %q; want the %d recent ones", len(got), got, len(recent))
	}
	var bySession = map[string][]string{}
	for _, g := range got {
		var ev struct{ ID, Session string }
		_ = json.Unmarshal([]byte(g), &ev)
		bySession[ev.Session] = append(bySession[ev.Session], ev.ID)
	}
	if strings.Join(bySession["s-a"], ",") != "a-0-1,a-0-2" || strings.Join(bySession[sb], ",") != "b-0-0,b-0-1" || bySession[sold] != nil {
		t.Fatalf("replayed %v", bySession)
	}
	// An EventSource reconnects to the same URL with its Last-Event-ID:
	// that position wins, exactly.
	c = e.getSSE(url.Values{"since": {"10m"}, "live": {"0"}}, map[string]string{"Last-Event-ID": "s-a:0:1"})
	if m := c.nextEvent(); m.ID != "s-a:0:2" {
		t.Fatalf("since with Last-Event-ID s-a:0:1 sent %q first; want s-a:0:2", m.ID)
	}
	if m := c.NextSkipping("ping"); !strings.HasPrefix(m.Comment(), "closing") {
		t.Fatalf("then %+v; want the end of the replay", m)
	}
}

// TestSSESinceRefusals: since out of its bounds, or with from.
func TestSSESinceRefusals(t *testing.T) {
	e := newEnv(t, nil)
	for name, c := range map[string]struct {
		q   url.Values
		hdr map[string]string
	}{
		"not a duration":          {url.Values{"since": {"15"}}, nil},
		"zero":                    {url.Values{"since": {"0s"}}, nil},
		"past 24h":                {url.Values{"since": {"25h"}}, nil},
		"with from":               {url.Values{"since": {"1m"}, "from": {"all"}}, nil},
		"bad, with Last-Event-ID": {url.Values{"since": {"1y"}}, map[string]string{"Last-Event-ID": "s:0:1"}},
	} {
		t.Run(name, func(t *testing.T) {
			resp, cancel := e.rawSSE(c.q, c.hdr)
			defer cancel()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 400 || !strings.Contains(string(body), `"invalid-filter"`) || !strings.Contains(string(body), "since") {
				t.Fatalf("got %d %s; want 400 invalid-filter naming since", resp.StatusCode, body)
			}
		})
	}
}
