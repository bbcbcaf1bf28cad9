package dialectd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
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

// newSCRig serves a rig whose sockets accepted from socks's clients have
// small send buffers; socks.Grow gives both ends normal buffers again when
// the client resumes: with 4 KiB buffers a resumed stream crawls (delayed
// ACKs on a tiny window), which only slows the test.
func newSCRig(t *testing.T, socks *gatewaytest.SmallSockets) *bdRig {
	t.Helper()
	if !gatewaytest.SmallSocketsSupported() {
		t.Skipf("%v is not a loopback address here", gatewaytest.SmallSocketsIP)
	}
	return newBDRig(t, bdRigConfig{
		SSE:      SSEConfig{Queue: scQueue, Batch: scBatch, WriteTimeout: time.Minute},
		Listener: socks.Listener,
	})
}

// scStream reads the rest of a stream opened by openSSE (br first) once
// the client resumes, with room for every message: the reader never blocks.
func scStream(t *testing.T, resp *http.Response, br *bufio.Reader) *gatewaytest.SSEStream {
	rest := *resp
	rest.Body = struct {
		io.Reader
		io.Closer
	}{br, resp.Body}
	return gatewaytest.NewSSEStream(t, &rest, scCount+8)
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

// scNext reads the next event of s, skipping comments.
func scNext(s *gatewaytest.SSEStream) scMsg {
	ms := s.Until("an event", func(m gatewaytest.SSEMessage) bool { return m.Event != "" })
	m := ms[len(ms)-1]
	out := scMsg{event: m.Event}
	var d struct {
		Delivery struct {
			Sequence uint64 `json:"sequence"`
		} `json:"delivery"`
	}
	if json.Unmarshal([]byte(m.Data), &d) != nil {
		out.index = -2 // not JSON: fails the caller's checks
		return out
	}
	out.seq = d.Delivery.Sequence
	out.index = bdIndex([]byte(m.Data), "slow")
	return out
}

// TestSlowBestEffortSSEIsBoundedAndShowsGap: a best_effort stream whose
// client stops reading while 3000 events are produced. The gateway keeps at
// most its queue, one write batch and what the sockets hold for it;
// everything else is dropped and counted. Once the client reads again it
// gets what was held, then the next event with a sequence that jumps over
// the drops: delivered + dropped = produced, exactly.
func TestSlowBestEffortSSEIsBoundedAndShowsGap(t *testing.T) {
	socks := &gatewaytest.SmallSockets{}
	r := newSCRig(t, socks)
	resp, br := r.openSSE(socks.Client(), "types=task.*")
	defer resp.Body.Close()
	sub := r.onlySub(t)

	r.produceKeyed(t, 0, scCount)
	bdWait(t, "the tail to offer every event", func() bool { return r.dispatched(t) == scCount })
	dropped := sub.Dropped()
	held := scCount - dropped // queued, in the handler's write, or in the sockets
	bound := uint64(scQueue + scBatch + scSocketBytes/scMinMessage)
	t.Logf("stalled: %d produced, %d dropped, %d held for the client (queue %d/%d), bound %d",
		scCount, dropped, held, sub.Deliveries().Len(), sub.Deliveries().Cap(), bound)
	if held > bound {
		t.Fatalf("the gateway holds %d events for a stalled client, bound %d", held, bound)
	}

	socks.Grow()
	s := scStream(t, resp, br)
	bdWait(t, "the queue to drain", func() bool { return sub.Deliveries().Len() == 0 })
	r.produceKeyed(t, scCount, 1)

	var got, gaps int
	var last uint64
	for {
		m := scNext(s)
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
	socks := &gatewaytest.SmallSockets{}
	r := newSCRig(t, socks)
	resp, br := r.openSSE(socks.Client(), "types=task.*&delivery_mode=replayable")
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
	t.Logf("stalled: %d produced, %d fallbacks, queue %d/%d", scCount, sub.Fallbacks(), sub.Deliveries().Len(), sub.Deliveries().Cap())

	socks.Grow()
	s := scStream(t, resp, br)
	seen := make([]bool, scCount+1)
	lastOfKey := [3]int{-1, -1, -1}
	for seq := uint64(1); seq <= scCount; seq++ {
		m := scNext(s)
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
	if m := scNext(s); m.index != scCount || m.seq != scCount+1 {
		t.Fatalf("after the catch-up: %+v, want event %d with sequence %d", m, scCount, scCount+1)
	}
	bdWait(t, "the subscription to rejoin the tail", func() bool { return r.joined(t, sub) })
}
