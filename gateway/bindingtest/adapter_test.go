package bindingtest

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// How end reports a stream the gateway shut down, per binding.
const (
	closingSSED = "subscription.expired, end of body" // reason shutdown, the cursor to resume from
	closingSSER = "closing comment, end of body"      // AEP-0003 §3.3
	closingWSD  = "subscription.expired, close 1001"  // then transport-websocket.md's going away
	closingWSR  = "closing frame, close 1001"         // AEP-0003 §3.5 rule 4
)

// sseOptions are the client options of an SSE stream opened with o.
func sseOptions(o openOpts, hdr http.Header) gatewaytest.SSEOptions {
	so := gatewaytest.SSEOptions{Header: hdr, Buffer: o.ahead}
	if o.slow != nil {
		so.Client, so.Buffer = o.slow.Client(), 0
	}
	return so
}

func wsOptions(o openOpts) gatewaytest.WSOptions {
	wo := gatewaytest.WSOptions{Buffer: o.ahead}
	if o.slow != nil {
		wo.HTTPClient, wo.Buffer = o.slow.Client(), 0
	}
	return wo
}

// openSSE opens an SSE stream and reads up to its ": stream open" comment;
// it returns the stream and the messages before that comment.
func openSSE(t *testing.T, u string, o openOpts, hdr http.Header) (*gatewaytest.SSEStream, []gatewaytest.SSEMessage) {
	t.Helper()
	s := gatewaytest.MustOpenSSE(t, u, sseOptions(o, hdr))
	pre := s.Until("the stream-open comment", func(m gatewaytest.SSEMessage) bool { return m.Comment() == "stream open" })
	return s, pre[:len(pre)-1]
}

// refusedSSE opens an SSE stream that must be refused, decodes the JSON
// error body into body and returns the status.
func refusedSSE(t *testing.T, u string, hdr http.Header, body any) int {
	t.Helper()
	st, resp := gatewaytest.OpenSSE(t, u, gatewaytest.SSEOptions{Header: hdr})
	if st != nil {
		t.Fatal("the stream opened")
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(body); err != nil {
		t.Fatalf("refusal %d: body: %v", resp.StatusCode, err)
	}
	return resp.StatusCode
}

// tryOK sorts a TryNext error: nil is a message, a timeout is false, the
// end of the stream fails t.
func tryOK(t *testing.T, err error) bool {
	t.Helper()
	if errors.Is(err, gatewaytest.ErrEnded) {
		t.Fatal(err)
	}
	return err == nil
}

// sseEnd reads an SSE stream's rest and normalizes how it ended.
func sseEnd(t *testing.T, s *gatewaytest.SSEStream, d time.Duration, norm func(gatewaytest.SSEMessage) msg) ([]msg, string) {
	t.Helper()
	rest, err := s.End(d)
	if err != nil {
		return nil, "error: " + err.Error()
	}
	var out []msg
	how := "end of body"
	for i, m := range rest {
		if m.IsComment() && strings.HasPrefix(m.Comment(), "closing") {
			if i != len(rest)-1 {
				return nil, "closing comment before other messages"
			}
			how = "closing comment, end of body"
			continue
		}
		out = append(out, norm(m))
	}
	return out, how
}
