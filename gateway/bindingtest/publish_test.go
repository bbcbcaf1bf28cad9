package bindingtest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// eventD is a dialect D event of session at seq; pad adds that many bytes
// to its payload.
func eventD(session string, seq, pad int) string {
	return fmt.Sprintf(`{"aep_version":"0.1","id":"evt_%s_%d","type":"task.progress","source":"agent:suite","session_id":%q,"created_at":"2026-07-09T10:00:00Z","payload":{"seq":%d,"pad":%q}}`,
		session, seq, session, seq, strings.Repeat("x", pad))
}

// eventR is a dialect R event of session at (epoch 0, seq); pad adds that
// many bytes to its data.
func eventR(session string, seq, pad int) string {
	return fmt.Sprintf(`{"aep":"0.1","id":"%s-%d","type":"tool.requested","time":"2026-07-03T10:14:00.000Z","source":"aep://host-a/agent/suite/session/%s","agent":"suite","session":%q,"seq":%d,"epoch":0,"subject":"Bash","severity":"notice","data":{"pad":%q}}`,
		session, seq, session, session, seq, strings.Repeat("x", pad))
}

// publishBatch bounds the events of one ingest request.
const publishBatch = 200

// publish writes session's events at seqs [from, to) through the dialect's
// ingest endpoint, in order, and returns their bytes by seq.
func publish(t *testing.T, s *stack, d dialect, session string, from, to, pad int) map[int]string {
	t.Helper()
	sent := map[int]string{}
	for lo := from; lo < to; lo += publishBatch {
		var body strings.Builder
		n := 0
		for seq := lo; seq < min(lo+publishBatch, to); seq++ {
			ev := eventR(session, seq, pad)
			if d == dialectD {
				ev = eventD(session, seq, pad)
			}
			sent[seq] = ev
			body.WriteString(ev)
			body.WriteByte('\n')
			n++
		}
		ingest(t, s, d, body.String(), n)
	}
	return sent
}

// ingest posts an NDJSON body of n events and requires all accepted.
func ingest(t *testing.T, s *stack, d dialect, body string, n int) {
	t.Helper()
	path := "/events"
	if d == dialectD {
		path = "/aep/events"
	}
	req, err := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	if d == dialectR {
		req.Header.Set("AEP-Version", "0.1")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("ingest: %d %s", resp.StatusCode, b)
	}
	if d == dialectD && !bytes.Contains(b, fmt.Appendf(nil, `"accepted":%d`, n)) {
		t.Fatalf("ingest: %s, want %d accepted", b, n)
	}
}
