package bindingtest

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// Slow consumers: small queues, and for the stalled client small socket
// buffers on both ends (gatewaytest.SmallSockets), so that a client that
// stops reading stalls the server after about a hundred events.
const (
	slowQueue    = 16   // every subscription's queue
	slowOutbound = 16   // every WebSocket connection's outbound queue
	slowBatch    = 8    // SSE-D messages per write
	slowCount    = 1000 // events published while the client is stalled
	slowPad      = 1000 // bytes added to each of them
	// slowSocket is the socket buffer size asked for (Linux doubles it).
	// Smaller ones make a resumed stream crawl on zero-window probes
	// (seconds per few dozen events), which only slows the test.
	slowSocket = 16 << 10
	// slowHeld bounds what can be held for a stalled client of a lossy
	// stream: its queue, the outbound queue, one write batch, the two
	// socket buffers (doubled) and the client libraries' buffers (64 KiB
	// at most), in events of about slowPad bytes. slowCount is several
	// times more.
	slowHeld = slowQueue + slowOutbound + slowBatch + (4*slowSocket+64<<10)/slowPad
)

// waitJoined waits until every stream of s has joined the live fan-out
// (in workers mode once the workers answered its registration; until then
// a stream reads its topic itself, and a stalled one blocks on its own
// queue rather than falling back): a stall is then the fan-out's to
// handle, in both modes.
func waitJoined(t *testing.T, s *stack) {
	t.Helper()
	gatewaytest.Poll(t, "the streams to join the live fan-out", func() bool { return metric(t, s, "aep_delivery_catchups") == 0 })
}

// metric reads a counter or gauge of the gateway's /metrics.
func metric(t *testing.T, s *stack, name string) float64 {
	t.Helper()
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// A client that stops reading does not stall the others, and the gateway
// does not hold an unbounded backlog for it: a lossy (D best_effort)
// stream drops beyond a bound and shows it, a lossless one (D replayable,
// R) leaves the live fan-out for reading Kafka again. Once the client
// reads again, a lossy stream brings at most the bound, a lossless one
// everything, in order, then live events.
func TestSlowConsumerBounded(t *testing.T) {
	for _, lossless := range []bool{false, true} {
		t.Run(map[bool]string{false: "lossy", true: "lossless"}[lossless], func(t *testing.T) {
			forEach(t, func(t *testing.T, b binding) {
				if !lossless && b.dialect == dialectR {
					t.Skip("R streams are lossless (AEP-0003 §8.4: notice and above are delivered or the stream ends); no lossy mode to test")
				}
				testSlowConsumer(t, b, lossless)
			})
		})
	}
}

// needSmallSockets skips a test on a host that cannot use SmallSockets.
func needSmallSockets(t *testing.T) {
	if !gatewaytest.SmallSocketsSupported() {
		t.Skip("this host cannot connect from " + gatewaytest.SmallSocketsIP.String() + ", which SmallSockets needs")
	}
}

func testSlowConsumer(t *testing.T, b binding, lossless bool) {
	needSmallSockets(t)
	socks := &gatewaytest.SmallSockets{Bytes: slowSocket}
	s := newStack(t, b.mode, stackConfig{Queue: slowQueue, Outbound: slowOutbound, Batch: slowBatch, Sockets: socks})
	const session = "sess_slow"
	stalled := b.open(t, s, openOpts{session: session, lossless: lossless, slow: socks})
	waitJoined(t, s)
	// Half the events with the stalled stream alone: the counter that
	// moves is its own.
	publish(t, s, b.dialect, session, 0, slowCount/2, slowPad)
	counter := "aep_delivery_dropped_total"
	if lossless {
		counter = "aep_delivery_fallbacks_total"
	}
	gatewaytest.Poll(t, counter+" to count the stalled stream", func() bool { return metric(t, s, counter) > 0 })
	// The other half with a healthy stream beside it, which gets them all
	// while the first is still stalled. (A live stream starts where the
	// live fan-out is, which may be behind the log's end: it may also get
	// some of the first half.)
	healthy := b.open(t, s, openOpts{session: session, lossless: true, ahead: slowCount})
	publish(t, s, b.dialect, session, slowCount/2, slowCount, slowPad)
	var after []msg
	for last := -1; last < slowCount-1; {
		m := events(t, healthy, 1)[0]
		if m.seq <= last {
			t.Fatalf("healthy stream: seq %d after %d", m.seq, last)
		}
		if last = m.seq; m.seq >= slowCount/2 {
			after = append(after, m)
		}
	}
	expectSeqs(t, after, session, slowCount/2, slowCount)
	if lossless {
		if n := metric(t, s, "aep_delivery_dropped_total"); n != 0 {
			t.Fatalf("lossless streams dropped %v events", n)
		}
	}

	// The client reads again. A lossy stream may drop a live event that
	// finds its queue still full, so markers are published until one
	// arrives.
	socks.Grow()
	publish(t, s, b.dialect, session, slowCount, slowCount+1, 0)
	marker := slowCount
	var got []msg
	wait := time.Second // lossy: then one more marker
	if lossless {
		wait = gatewaytest.Wait // nothing is dropped: a silence is a failure
	}
	for {
		m, ok := stalled.tryNext(t, wait)
		if !ok {
			if lossless {
				t.Fatalf("lossless stream: nothing within %v after %d events", wait, len(got))
			}
			marker++
			publish(t, s, b.dialect, session, marker, marker+1, 0)
			continue
		}
		if m.kind == kindHeartbeat || m.kind == kindReplayed && len(m.gaps) == 0 {
			continue
		}
		if m.kind != kindEvent {
			t.Fatalf("unexpected %v: %s", m.kind, m.raw)
		}
		if len(got) > 0 && m.seq <= got[len(got)-1].seq {
			t.Fatalf("seq %d after %d", m.seq, got[len(got)-1].seq)
		}
		got = append(got, m)
		if m.seq >= slowCount {
			break
		}
	}
	if lossless {
		t.Logf("stalled lossless client: fell back to Kafka, then got all %d events", len(got))
		expectSeqs(t, got, session, 0, slowCount+1)
		return
	}
	held := len(got) - 1
	t.Logf("stalled lossy client: %d of %d events held for it (bound %d), %d markers published",
		held, slowCount, slowHeld, marker-slowCount+1)
	if held > slowHeld {
		t.Fatalf("the gateway held %d events for a stalled client, bound %d", held, slowHeld)
	}
}

// A burst far larger than the queues reaches a lossless subscriber that
// reads slowly completely, in order, once each, then live events follow.
func TestBackpressure(t *testing.T) {
	forEach(t, func(t *testing.T, b binding) {
		const queue, burst = 4, 300
		s := newStack(t, b.mode, stackConfig{Queue: queue, Outbound: queue, Batch: 2})
		const session = "sess_burst"
		st := b.open(t, s, openOpts{session: session, lossless: true})
		sent := publish(t, s, b.dialect, session, 0, burst, 100)
		var got []msg
		for len(got) < burst {
			if len(got)%25 == 0 {
				time.Sleep(5 * time.Millisecond) // a slow reader: pace, not a wait for anything
			}
			got = append(got, events(t, st, 1)...)
		}
		expectSeqs(t, got, session, 0, burst)
		for _, m := range got {
			expectBytes(t, b.dialect, sent[m.seq], m)
		}
		publish(t, s, b.dialect, session, burst, burst+1, 0)
		expectSeqs(t, events(t, st, 1), session, burst, burst+1)
		if n := metric(t, s, "aep_delivery_dropped_total"); n != 0 {
			t.Fatalf("%v events dropped", n)
		}
		t.Logf("fallbacks to Kafka during the burst: %v", metric(t, s, "aep_delivery_fallbacks_total"))
	})
}
