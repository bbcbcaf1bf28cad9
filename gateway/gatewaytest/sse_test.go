package gatewaytest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The parser on hand-written streams, so a reader that sees nothing cannot
// pass the tests built on it.
func TestParseSSE(t *testing.T) {
	for _, tc := range []struct {
		name, stream string
		want         []SSEMessage
	}{
		{"comment then event", ": stream open\n\nid: c1\nevent: task.progress\ndata: {\"a\":1}\n\n",
			[]SSEMessage{{Comments: []string{"stream open"}}, {ID: "c1", HasID: true, Event: "task.progress", Data: `{"a":1}`, HasData: true}}},
		{"CRLF and CR line ends", "event: x\r\ndata: 1\rdata: 2\r\n\r\n",
			[]SSEMessage{{Event: "x", Data: "1\n2", HasData: true}}},
		{"no space after the colon, empty id", "data:v\nid:\n\n",
			[]SSEMessage{{Data: "v", HasData: true, HasID: true}}},
		{"blank lines between messages", "\n\n: ping\n\n\n",
			[]SSEMessage{{Comments: []string{"ping"}}}},
		{"unknown field", "retry: 10\n\n",
			[]SSEMessage{{Comments: []string{"UNKNOWN retry: 10"}}}},
		{"unterminated message is not emitted", "data: x\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []SSEMessage
			if err := ParseSSE(strings.NewReader(tc.stream), func(m SSEMessage) bool { got = append(got, m); return true }); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if err := ParseSSE(strings.NewReader("data: "+strings.Repeat("x", MaxSSELine)+"\n\n"), func(SSEMessage) bool { return true }); err == nil {
		t.Fatal("a line over MaxSSELine was accepted")
	}
	n := 0
	_ = ParseSSE(strings.NewReader(": a\n\n: b\n\n"), func(SSEMessage) bool { n++; return false })
	if n != 1 {
		t.Fatalf("emit returning false: %d calls, want 1", n)
	}
}

// A refused stream's body is readable: OpenSSE hands it over unread.
func TestOpenSSERefusedBody(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"nope"}`, http.StatusBadRequest)
	}))
	defer hs.Close()
	s, resp := OpenSSE(t, hs.URL, SSEOptions{})
	if s != nil {
		t.Fatal("stream opened")
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "nope") {
		t.Fatalf("%d %q %v", resp.StatusCode, b, err)
	}
}

// NextSkipping passes over the named comments only; RequestSSE hands the
// body over unread.
func TestNextSkippingAndRequestSSE(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, ": stream open\n\n: heartbeat\n\n: ping\n\nevent: a\ndata: 1\n\n: heartbeat\n\n: closing\n\n")
	}))
	defer hs.Close()
	s := MustOpenSSE(t, hs.URL, SSEOptions{})
	if m := s.NextSkipping("heartbeat", "ping"); m.Comment() != "stream open" {
		t.Fatalf("got %+v, want the stream-open comment", m)
	}
	if m := s.NextSkipping("heartbeat", "ping"); m.Event != "a" || m.Data != "1" {
		t.Fatalf("got %+v, want event a", m)
	}
	if m := s.NextSkipping("heartbeat"); m.Comment() != "closing" {
		t.Fatalf("got %+v, want the closing comment", m)
	}
	resp := RequestSSE(t, hs.URL, SSEOptions{})
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !strings.HasPrefix(string(b), ": stream open\n\n") {
		t.Fatalf("raw body %q: %v", b, err)
	}
}
