package dialectr_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aep-gateway/aep-gateway/gateway/dialectr"
)

// replayBody reads a live=0 stream to its end and returns its comments
// and data lines in order ("#comment", "data").
func replayBody(t *testing.T, e *env, q url.Values, hdr map[string]string) []string {
	t.Helper()
	resp, cancel := e.rawSSE(q, hdr)
	defer cancel()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /stream?%s: %d %s", q.Encode(), resp.StatusCode, b)
	}
	body, err := io.ReadAll(resp.Body) // returns only when the stream ends
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		switch {
		case strings.HasPrefix(line, ": "):
			out = append(out, "#"+line[2:])
		case strings.HasPrefix(line, "data: "):
			out = append(out, line[6:])
		}
	}
	return out
}

// live=0 replays, then ends the stream; it composes with from, "all" and
// Last-Event-ID, and without a position the stream opens and ends.
func TestSSELiveZeroEnds(t *testing.T) {
	e := newEnv(t, nil)
	e.getSSE(nil, nil).Close() // starts the tenant's indexer
	evs := []string{rEvent("z-0", "s-z", 0, 0), rEvent("z-1", "s-z", 0, 1), rEvent("z-2", "s-z", 0, 2)}
	e.post(evs...)
	want := []string{"#stream open", evs[1], evs[2], "#closing: replay complete (live=0)"}
	for _, c := range []struct {
		q   url.Values
		hdr map[string]string
	}{
		{url.Values{"live": {"0"}, "from": {`[{"session":"s-z","seq":0}]`}}, nil},
		{url.Values{"live": {"false"}}, map[string]string{"Last-Event-ID": "s-z:0:0"}},
	} {
		if got := replayBody(t, e, c.q, c.hdr); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%v %v:\n got %q\nwant %q", c.q, c.hdr, got, want)
		}
	}
	all := replayBody(t, e, url.Values{"live": {"0"}, "from": {"all"}, "filter": {`{"session":"s-z"}`}}, nil)
	if fmt.Sprint(all) != fmt.Sprint([]string{"#stream open", evs[0], evs[1], evs[2], "#closing: replay complete (live=0)"}) {
		t.Errorf("from=all live=0: %q", all)
	}
	if got := replayBody(t, e, url.Values{"live": {"0"}}, nil); fmt.Sprint(got) != fmt.Sprint([]string{"#stream open", "#closing: replay complete (live=0)"}) {
		t.Errorf("live=0 alone: %q", got)
	}
	resp, cancel := e.rawSSE(url.Values{"live": {"maybe"}}, nil)
	defer cancel()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("live=maybe: %d, want 400", resp.StatusCode)
	}
}

// replay.buffer is per session: a resume holds the session's latest
// ReplayBuffer events; a position predating them gets replay-exhausted
// naming the first held, on both bindings, before any replayed event, then
// delivery from it; a position inside them gets no marker.
func TestReplayBufferPerSession(t *testing.T) {
	e := newEnv(t, func(c *dialectr.Config) { c.ReplayBuffer = 4 })
	e.getSSE(nil, nil).Close()
	var evs []string
	for seq := range 10 {
		evs = append(evs, rEvent(fmt.Sprint("w-", seq), "s-w", 1, seq))
		evs = append(evs, rEvent(fmt.Sprint("o-", seq), "s-o", 1, seq)) // another session: its own window
	}
	e.post(evs...)
	got := replayBody(t, e, url.Values{"live": {"0"}, "from": {`[{"session":"s-w","epoch":1,"seq":0}]`}}, nil)
	want := []string{"#stream open", "#replay-exhausted s-w 1:6", evs[12], evs[14], evs[16], evs[18], "#closing: replay complete (live=0)"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("predating position:\n got %q\nwant %q", got, want)
	}
	got = replayBody(t, e, url.Values{"live": {"0"}, "from": {`[{"session":"s-w","epoch":1,"seq":5}]`}}, nil)
	if want := []string{"#stream open", evs[12], evs[14], evs[16], evs[18], "#closing: replay complete (live=0)"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("held position:\n got %q\nwant %q", got, want)
	}

	w := e.dialWS(consumerHello)
	w.Subscribe("r", `"from":[{"session":"s-w","epoch":1,"seq":2}]`)
	if f := w.Next(); f.Str("type") != "replay-exhausted" || f.Str("sub") != "r" || fmt.Sprint(f["earliest"]) != "map[epoch:1 seq:6]" {
		t.Fatalf("got %v, want replay-exhausted of sub r, earliest 1:6", f)
	}
	for _, i := range []int{12, 14, 16, 18} {
		if got := string(w.NextFrame()); got != evs[i] {
			t.Fatalf("got %s, want %s", got, evs[i])
		}
	}
	// Live events of the session follow the held window.
	live := rEvent("w-10", "s-w", 1, 10)
	e.post(live)
	if got := string(w.NextFrame()); got != live {
		t.Fatalf("live: got %s", got)
	}
}
