package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// takeoverBound is how long after its holder's node died (or stopped) a
// consumer must be served: LeaseTTL (6 s) plus room for the journal round
// trips of a real broker on the shared test machine.
const takeoverBound = 9 * time.Second

// publishEvery publishes one D event through g every interval until ctx
// ends; the first error is returned on the channel.
func publishEvery(ctx context.Context, g *gatewayProc, interval time.Duration) <-chan error {
	out := make(chan error, 1)
	go func() {
		defer close(out)
		for i := 0; ctx.Err() == nil; i++ {
			r, err := g.post(ctx, "/aep/events", "application/x-ndjson", nil, dEvent(i, fmt.Sprintf("sess_%d", i%5))+"\n")
			if ctx.Err() != nil {
				return
			}
			if err != nil || r.status != http.StatusAccepted {
				out <- fmt.Errorf("publish %d: %v %d %s", i, err, r.status, r.body)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
	}()
	return out
}

// firstEvent reads SSE messages from s until an event of the subscription
// (task.progress) arrives, or within passes; it returns the messages seen.
func firstEvent(s *gatewaytest.SSEStream, within time.Duration) ([]gatewaytest.SSEMessage, bool) {
	deadline := time.Now().Add(within)
	var seen []gatewaytest.SSEMessage
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return seen, false
		}
		m, err := s.TryNext(left)
		if err != nil {
			return seen, false
		}
		seen = append(seen, m)
		if m.Event == "task.progress" {
			return seen, true
		}
	}
}

// watchedConnection is one connection of a client whose watchdog gives up
// when no event came within watchdog of the request (comments do not
// count): it reports whether an event came and the messages seen.
func watchedConnection(ctx context.Context, g *gatewayProc, id string, watchdog time.Duration) ([]gatewaytest.SSEMessage, bool, error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := time.AfterFunc(watchdog, cancel)
	defer timer.Stop()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, g.URL+"/aep/subscriptions/"+id+"/stream", nil)
	if err != nil {
		return nil, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			return nil, false, nil // the watchdog fired before the answer
		}
		return nil, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, false, nil // a takeover under way (409/503): the client retries
	}
	var seen []gatewaytest.SSEMessage
	event := false
	_ = gatewaytest.ParseSSE(resp.Body, func(m gatewaytest.SSEMessage) bool {
		seen = append(seen, m)
		event = m.Event == "task.progress"
		return !event
	})
	return seen, event, nil
}

// The serving node is SIGKILLed; the consumer has a 3 s watchdog (no event
// within 3 s of a request: it reconnects) and alternates between the two
// other nodes (both followed the tenant's journal: acks went to them).
// Every reconnect is a new claim; the stream is still served within
// LeaseTTL (plus slack) of the kill, and each waiting connection shows its
// waiting comment at once.
func TestDurableTakeoverWithClientWatchdog(t *testing.T) {
	c := newDurableCluster(t, 3, `{"types":["task.*"],"ack_timeout_ms":60000}`)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pubErr := publishEvery(ctx, c.nodes[0], 100*time.Millisecond)
	first, err := c.openStream(ctx, c.nodes[1])
	if err != nil {
		t.Fatal(err)
	}
	s1 := gatewaytest.NewSSEStream(t, first, 256)
	if _, ok := firstEvent(s1, 20*time.Second); !ok {
		t.Fatal("no event on the first stream")
	}
	// acks through nodes 2 and 0: both follow the tenant's journal
	for _, g := range []*gatewayProc{c.nodes[2], c.nodes[0]} {
		if r, err := g.post(ctx, "/aep/subscriptions/"+c.subID+"/acks", "application/json", nil, ackBatch([]string{"evt_none"})); err != nil || r.status != http.StatusOK {
			t.Fatalf("ack: %v %d %s", err, r.status, r.body)
		}
	}
	c.kill(c.nodes[1])
	killed := time.Now()
	s1.Close()

	const watchdog = 3 * time.Second
	var served time.Duration
	silent := 0
	for i := 0; served == 0; i++ {
		if time.Since(killed) > takeoverBound {
			t.Fatalf("not served %v after the kill (%d connections, %d silent until the watchdog fired)", time.Since(killed), i, silent)
		}
		node := []int{2, 0}[i%2]
		seen, ok, err := watchedConnection(ctx, c.nodes[node], c.subID, watchdog)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			served = time.Since(killed)
		}
		if len(seen) == 0 {
			silent++
			t.Logf("connection %d to node %d: nothing within %v", i, node, watchdog)
			continue
		}
		t.Logf("connection %d to node %d: first message %q (%d messages), event: %v", i, node, seen[0].Comment(), len(seen), ok)
	}
	t.Logf("served %v after the kill", served.Round(time.Millisecond))
	if silent > 0 {
		t.Fatalf("%d connections saw nothing before the watchdog fired (no waiting comment)", silent)
	}
	cancel()
	if err := <-pubErr; err != nil {
		t.Fatal(err)
	}
	jctx, jcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer jcancel()
	if _, err := c.journalEpochs(jctx); err != nil {
		t.Fatal(err)
	}
}

// bigEvent is a D event of about 20 KB: a few hundred of them fill a
// connection's socket buffers, so that deliveries wait in the stream's
// queue.
func bigEvent(i int) string {
	return fmt.Sprintf(`{"aep_version":"0.1","id":"evt_big_%05d","type":"task.progress","source":"agent:t","session_id":"sess_%d","created_at":"2026-07-09T10:00:00Z","payload":{"i":%d,"pad":%q}}`,
		i, i%5, i, strings.Repeat("x", 20<<10))
}

// rawReader reads a response body into chunks on its own goroutine, so a
// test can leave it unread (socket buffers fill), then drain it.
type rawReader struct {
	chunks chan []byte
}

func newRawReader(resp *http.Response) *rawReader {
	r := &rawReader{chunks: make(chan []byte)}
	go func() {
		defer close(r.chunks)
		for {
			b := make([]byte, 64<<10)
			n, err := resp.Body.Read(b)
			if n > 0 {
				r.chunks <- b[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	return r
}

// drain reads until nothing came for quiet (or the body ended) and
// returns the bytes and whether the body ended.
func (r *rawReader) drain(quiet time.Duration) ([]byte, bool) {
	var out []byte
	for {
		select {
		case b, ok := <-r.chunks:
			if !ok {
				return out, true
			}
			out = append(out, b...)
		case <-time.After(quiet):
			return out, false
		}
	}
}

// The serving node is SIGSTOPped for longer than the lease while its
// consumer is slow (socket buffers full, deliveries waiting in the
// stream's queue); the consumer moves to the other node and is served;
// what the stopped node had written is drained (it cannot write while
// stopped); then it is SIGCONTed: it writes no event after waking (what
// waited in its queue is taken back), and the journal shows no two epochs
// delivering at once.
func TestDurableStoppedHolderDeliversNothingAfterWaking(t *testing.T) {
	c := newDurableCluster(t, 2, `{"types":["task.*"],"ack_timeout_ms":60000}`)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	holder := c.nodes[0]
	resp, err := c.openStream(ctx, holder)
	if err != nil {
		t.Fatal(err)
	}
	old := newRawReader(resp) // not read until the holder is stopped
	defer resp.Body.Close()
	const n = 600
	for start := 0; start < n; start += 20 {
		var body strings.Builder
		for i := start; i < start+20; i++ {
			body.WriteString(bigEvent(i) + "\n")
		}
		if r, err := c.nodes[1].post(ctx, "/aep/events", "application/x-ndjson", nil, body.String()); err != nil || r.status != http.StatusAccepted {
			t.Fatalf("publish: %v %d %s", err, r.status, r.body)
		}
	}
	// the holder has handed out more than the socket buffers hold
	gatewaytest.Poll(t, "deliveries waiting behind a full socket", func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, holder.URL+"/aep/subscriptions/"+c.subID, nil)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer r.Body.Close()
		var view struct {
			Pending int `json:"pending_acks"`
		}
		return json.NewDecoder(r.Body).Decode(&view) == nil && view.Pending >= 400
	})
	if err := holder.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	before, ended := old.drain(time.Second) // all it wrote before the stop
	if ended {
		t.Fatal("the stopped holder's connection ended")
	}
	newer, err := c.openStream(ctx, c.nodes[1])
	if err != nil {
		t.Fatal(err)
	}
	s2 := gatewaytest.NewSSEStream(t, newer, n*2)
	if _, ok := firstEvent(s2, takeoverBound); !ok {
		t.Fatalf("not served %v after the holder stopped", time.Since(stopped))
	}
	t.Logf("served %v after the holder stopped; %d events drained from the stopped holder's connection",
		time.Since(stopped).Round(time.Millisecond), strings.Count(string(before), "event: task.progress"))
	// the stop outlasts the lease, then the holder wakes
	gatewaytest.Poll(t, "a stop longer than the lease", func() bool { return time.Since(stopped) > takeoverBound })
	if more, _ := old.drain(100 * time.Millisecond); len(more) > 0 {
		t.Fatalf("%d bytes from a stopped process", len(more))
	}
	if err := holder.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// A write syscall under way when the process stopped may still finish
	// on waking (bytes a process handed to the kernel cannot be recalled):
	// the transport cuts a leased stream's writes into pieces of at most
	// transport.LeasedChunk bytes and checks the lease before each, so at
	// most that piece follows, never another event of the batch.
	after, ended := old.drain(5 * time.Second)
	if len(after) > transport.LeasedChunk {
		t.Fatalf("the woken holder wrote %d bytes (%d event lines) after SIGCONT, more than one %d-byte piece",
			len(after), strings.Count(string(after), "event: task.progress"), transport.LeasedChunk)
	}
	t.Logf("after SIGCONT: %d bytes, connection ended: %v", len(after), ended)
	jctx, jcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer jcancel()
	if _, err := c.journalEpochs(jctx); err != nil {
		t.Fatal(err)
	}
}
