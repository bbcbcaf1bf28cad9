package dialectd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/engine"
)

// Slow consumers over real sockets: an SSE client that stops reading fills
// its TCP receive window, the server's send buffer, then the handler blocks
// in Write and the subscription's queue fills. Both sockets are given small
// buffers (4 KiB asked; Linux doubles it) so that happens after a few dozen
// events rather than megabytes.

const (
	scQueue = 16   // SSEConfig.Queue of the slow stream
	scBatch = 8    // SSEConfig.Batch: messages per write
	scCount = 3000 // events produced while the client is stalled
	// scSocketBytes bounds what the two small socket buffers and the HTTP
	// writer's buffer can hold (about 16 KiB + 4 KiB in practice), with a
	// wide margin.
	scSocketBytes = 256 << 10
	scMinMessage  = 400 // bytes of the smallest SSE message of these events
)

// scSockets keeps the test's sockets (both ends) to give them normal
// buffers again when the client resumes: with 4 KiB buffers a resumed
// stream crawls (delayed ACKs on a tiny window), which only slows the test.
type scSockets struct {
	mu    sync.Mutex
	conns []*net.TCPConn
}

func (s *scSockets) add(c *net.TCPConn, small func(*net.TCPConn)) {
	small(c)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns = append(s.conns, c)
}

func (s *scSockets) grow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.SetReadBuffer(1 << 20)
		_ = c.SetWriteBuffer(1 << 20)
	}
}

func newSCRig(t *testing.T, socks *scSockets) *bdRig {
	return newBDRig(t, bdRigConfig{
		SSE: SSEConfig{Queue: scQueue, Batch: scBatch, WriteTimeout: time.Minute},
		Accepted: func(c *net.TCPConn) {
			socks.add(c, func(c *net.TCPConn) { _ = c.SetWriteBuffer(4096) })
		},
	})
}

// scClient is an HTTP/1.1 client whose sockets have a small receive buffer.
func scClient(socks *scSockets) *http.Client {
	d := &net.Dialer{}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if tc, ok := c.(*net.TCPConn); ok && err == nil {
				socks.add(tc, func(c *net.TCPConn) { _ = c.SetReadBuffer(4096) })
			}
			return c, err
		},
		DisableCompression: true,
	}}
}

// onlySub is the tail's one joined subscription (the SSE stream's).
func (r *bdRig) onlySub(t *testing.T) *engine.Subscription {
	t.Helper()
	info := r.tail(t)
	if len(info.Joined) != 1 {
		t.Fatalf("%d subscriptions on the tail, want 1", len(info.Joined))
	}
	return info.Joined[0]
}

func (r *bdRig) tail(t *testing.T) engine.TailInfo {
	t.Helper()
	info, ok := r.eng.Tail(r.tenant)
	if !ok {
		t.Fatal("no tail")
	}
	return info
}

// dispatched is how many records the tail has offered since the topic was
// empty.
func (r *bdRig) dispatched(t *testing.T) int64 { return r.tail(t).Dispatched }

func (r *bdRig) joined(t *testing.T, s *engine.Subscription) bool {
	return slices.Contains(r.tail(t).Joined, s)
}

// produceKeyed writes events [from, from+n) with prefix "slow", keyed by
// n%3 so each key's events share a partition and keep their order there.
func (r *bdRig) produceKeyed(t *testing.T, from, n int) {
	t.Helper()
	for lo := from; lo < from+n; lo += 500 {
		var recs []*kgo.Record
		for i := lo; i < min(lo+500, from+n); i++ {
			rec := r.bdRecord("slow", i, -1)
			rec.Key = fmt.Appendf(nil, "key-%d", i%3)
			recs = append(recs, rec)
		}
		if err := r.prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

type scMsg struct {
	event string
	index int // of evt_slow_<index>; -1 for other events
	seq   uint64
}

// scRead parses the stream's messages into out until the body ends.
func scRead(br *bufio.Reader, out chan<- scMsg) {
	defer close(out)
	var m scMsg
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		switch {
		case line == "\n":
			if m.event != "" {
				out <- m
			}
			m = scMsg{}
		case strings.HasPrefix(line, "event: "):
			m.event = strings.TrimSpace(line[7:])
		case strings.HasPrefix(line, "data: "):
			var d struct {
				Delivery struct {
					Sequence uint64 `json:"sequence"`
				} `json:"delivery"`
			}
			if json.Unmarshal([]byte(line[6:]), &d) != nil {
				m.index = -2 // not JSON: fails the caller's checks
				continue
			}
			m.seq = d.Delivery.Sequence
			m.index = bdIndex([]byte(line), "slow")
		}
	}
}

func scNext(t *testing.T, msgs <-chan scMsg) scMsg {
	t.Helper()
	select {
	case m, ok := <-msgs:
		if !ok {
			t.Fatal("stream ended")
		}
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no message within 30s")
	}
	return scMsg{}
}

// TestSlowBestEffortSSEIsBoundedAndShowsGap: a best_effort stream whose
// client stops reading while 3000 events are produced. The gateway keeps at
// most its queue, one write batch and what the sockets hold for it;
// everything else is dropped and counted. Once the client reads again it
// gets what was held, then the next event with a sequence that jumps over
// the drops: delivered + dropped = produced, exactly.
func TestSlowBestEffortSSEIsBoundedAndShowsGap(t *testing.T) {
	socks := &scSockets{}
	r := newSCRig(t, socks)
	resp, br := r.openSSE(scClient(socks), "types=task.*")
	defer resp.Body.Close()
	sub := r.onlySub(t)

	r.produceKeyed(t, 0, scCount)
	bdWait(t, "the tail to offer every event", func() bool { return r.dispatched(t) == scCount })
	dropped := sub.Dropped()
	held := scCount - dropped // queued, in the handler's write, or in the sockets
	bound := uint64(scQueue + scBatch + scSocketBytes/scMinMessage)
	t.Logf("stalled: %d produced, %d dropped, %d held for the client (queue %d/%d), bound %d",
		scCount, dropped, held, len(sub.C()), cap(sub.C()), bound)
	if held > bound {
		t.Fatalf("the gateway holds %d events for a stalled client, bound %d", held, bound)
	}

	socks.grow()
	msgs := make(chan scMsg, scCount+8) // room for every message: the reader never blocks
	var wg sync.WaitGroup
	wg.Go(func() { scRead(br, msgs) })
	defer func() { resp.Body.Close(); wg.Wait() }()
	bdWait(t, "the queue to drain", func() bool { return len(sub.C()) == 0 })
	r.produceKeyed(t, scCount, 1)

	var got, gaps int
	var last uint64
	for {
		m := scNext(t, msgs)
		if m.event != "task.progress" || m.index < 0 || m.seq <= last {
			t.Fatalf("message %+v after sequence %d", m, last)
		}
		if m.seq != last+1 {
			gaps++
		}
		last = m.seq
		got++
		if m.index == scCount {
			break
		}
	}
	if last != scCount+1 {
		t.Fatalf("last event has sequence %d, want %d", last, scCount+1)
	}
	if gaps == 0 {
		t.Fatal("no gap in dialectd.sequence after drops")
	}
	if uint64(got)+sub.Dropped() != scCount+1 {
		t.Fatalf("%d delivered + %d dropped != %d produced", got, sub.Dropped(), scCount+1)
	}
}

// TestSlowReplayableSSECatchesUpExactlyOnce: a replayable stream whose
// client stops reading while 3000 events are produced falls back to
// catch-up reading: it leaves the tail (which then holds nothing for it),
// drops nothing, and once the client reads again it gets every event exactly
// once, in order per key, with contiguous sequences and no event.replayed
// (nothing was lost, so there is nothing to tell), then live events again.
func TestSlowReplayableSSECatchesUpExactlyOnce(t *testing.T) {
	socks := &scSockets{}
	r := newSCRig(t, socks)
	resp, br := r.openSSE(scClient(socks), "types=task.*&delivery_mode=replayable")
	defer resp.Body.Close()
	sub := r.onlySub(t)

	r.produceKeyed(t, 0, scCount)
	bdWait(t, "the tail to offer every event", func() bool { return r.dispatched(t) == scCount })
	bdWait(t, "a fallback to catch-up", func() bool { return sub.Fallbacks() > 0 })
	if r.joined(t, sub) {
		t.Fatal("a stalled lossless subscription is still on the tail")
	}
	if sub.Dropped() != 0 {
		t.Fatalf("lossless stream dropped %d", sub.Dropped())
	}
	t.Logf("stalled: %d produced, %d fallbacks, queue %d/%d", scCount, sub.Fallbacks(), len(sub.C()), cap(sub.C()))

	socks.grow()
	msgs := make(chan scMsg, scCount+8) // room for every message: the reader never blocks
	var wg sync.WaitGroup
	wg.Go(func() { scRead(br, msgs) })
	defer func() { resp.Body.Close(); wg.Wait() }()
	seen := make([]bool, scCount+1)
	lastOfKey := [3]int{-1, -1, -1}
	for seq := uint64(1); seq <= scCount; seq++ {
		m := scNext(t, msgs)
		if m.event != "task.progress" || m.index < 0 || m.index >= scCount || m.seq != seq {
			t.Fatalf("message %+v, want sequence %d", m, seq)
		}
		if seen[m.index] {
			t.Fatalf("event %d delivered twice", m.index)
		}
		seen[m.index] = true
		if k := m.index % 3; m.index <= lastOfKey[k] {
			t.Fatalf("event %d after %d of the same key", m.index, lastOfKey[k])
		} else {
			lastOfKey[k] = m.index
		}
	}
	// Every event arrived once; the next one is live, right after them.
	r.produceKeyed(t, scCount, 1)
	if m := scNext(t, msgs); m.index != scCount || m.seq != scCount+1 {
		t.Fatalf("after the catch-up: %+v, want event %d with sequence %d", m, scCount, scCount+1)
	}
	bdWait(t, "the subscription to rejoin the tail", func() bool { return r.joined(t, sub) })
}

// TestSlowConsumerHelpers checks the SSE parser of these tests on a
// hand-written stream, so a parser that saw nothing cannot pass them.
func TestSlowConsumerHelpers(t *testing.T) {
	stream := ": stream open\n\nid: c1\nevent: task.progress\ndata: {\"id\":\"evt_slow_00000007\",\"delivery\":{\"mode\":\"best_effort\",\"sequence\":9,\"cursor\":\"c1\"}}\n\n" +
		"id: c2\nevent: event.replayed\ndata: {\"id\":\"evt_X\"}\n\n"
	msgs := make(chan scMsg, 4)
	var wg sync.WaitGroup
	wg.Go(func() { scRead(bufio.NewReader(strings.NewReader(stream)), msgs) })
	wg.Wait()
	var got []scMsg
	for m := range msgs {
		got = append(got, m)
	}
	want := []scMsg{{event: "task.progress", index: 7, seq: 9}, {event: "event.replayed", index: -1}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("parsed %+v, want %+v", got, want)
	}
}
