package dialectr_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/dialectr"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/ingest"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// heldIngest is the gateway's real ingest with its first call held until
// release, recording how many events each call wrote: a write that takes
// its time, as Kafka's do under load.
type heldIngest struct {
	next    ingest.Func
	entered chan struct{} // closed when the first call begins
	gate    chan struct{} // closed by release
	once    sync.Once

	mu    sync.Mutex
	sizes []int
}

func holdIngest(c *dialectr.Config) *heldIngest {
	h := &heldIngest{next: c.Ingest, entered: make(chan struct{}), gate: make(chan struct{})}
	c.Ingest = h.ingest
	return h
}

func (h *heldIngest) ingest(ctx context.Context, t tenant.Tenant, events [][]byte) []ingest.Result {
	h.mu.Lock()
	first := len(h.sizes) == 0
	h.sizes = append(h.sizes, len(events))
	h.mu.Unlock()
	if first {
		close(h.entered)
		<-h.gate
	}
	return h.next(ctx, t, events)
}

func (h *heldIngest) release() { h.once.Do(func() { close(h.gate) }) }

func (h *heldIngest) calls() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.sizes)
}

// heldEmitter is a relay whose ingest is held (heldIngest), a consumer
// subscribed to everything and an emitter.
func heldEmitter(t *testing.T) (h *heldIngest, consumer, emitter *gatewaytest.WSR) {
	t.Helper()
	e := newEnv(t, func(c *dialectr.Config) { h = holdIngest(c) })
	t.Cleanup(h.release)
	consumer = e.dialWS(consumerHello)
	consumer.Subscribe("all", "")
	emitter = e.dialWS(`{"type":"hello","versions":["0.1"],"role":"emitter","identity":{"agent":"claude-code"}}`)
	return h, consumer, emitter
}

// sendEvents sends n events of session, ids prefix-0..., and returns them.
func sendEvents(w *gatewaytest.WSR, prefix, session string, n int) []string {
	evs := make([]string, n)
	for i := range evs {
		evs[i] = rEvent(fmt.Sprintf("%s-%d", prefix, i), session, 0, i)
		w.Send(evs[i])
	}
	return evs
}

// An emitter that sends without waiting has the frames read while a write
// is in flight written together, in order, each answered (none here), and
// a ping's pong comes after all of them.
func TestWSEmitterEventsReadDuringAWriteGoTogether(t *testing.T) {
	h, consumer, emitter := heldEmitter(t)
	const n = 40
	want := sendEvents(emitter, "p", "s-pipe", n)
	emitter.Send(`{"type":"ping","t":1}`)
	<-h.entered
	time.Sleep(100 * time.Millisecond) // the relay reads the frames behind the held write
	h.release()
	if f := emitter.Next(); f.Str("type") != "pong" {
		t.Fatalf("got %v, want the pong, after every event (none refused)", f)
	}
	for i, ev := range want {
		if b := consumer.NextFrame(); string(b) != ev {
			t.Fatalf("consumer's event %d: %s, want %s", i, b, ev)
		}
	}
	calls := h.calls()
	total := 0
	for _, c := range calls {
		total += c
	}
	if total != n || slices.Max(calls) < 2 {
		t.Fatalf("writes of %v events: want %d in all, some together", calls, n)
	}
}

// The frames a client sent before it went away are written: each was read,
// as when every frame was written before the next was read.
func TestWSEmitterEventsReadBeforeTheClientLeftAreWritten(t *testing.T) {
	h, consumer, emitter := heldEmitter(t)
	want := sendEvents(emitter, "gone", "s-gone", 20)
	<-h.entered
	time.Sleep(100 * time.Millisecond)
	emitter.Close() // gone with its events queued behind the held write
	h.release()
	for i, ev := range want {
		if b := consumer.NextFrame(); string(b) != ev {
			t.Fatalf("consumer's event %d: %s, want %s", i, b, ev)
		}
	}
}

// Refusals come in the order of the events, each naming its event, and a
// refused event between accepted ones holds back none of them.
func TestWSEmitterRefusalsInOrderAmongWrittenEvents(t *testing.T) {
	h, consumer, emitter := heldEmitter(t)
	ok1, ok2 := rEvent("ok-1", "s-mix", 0, 0), rEvent("ok-2", "s-mix", 0, 1)
	emitter.Send(ok1)
	emitter.Send(`{"aep":"0.1","id":"bad-1","type":"tool.requested"}`)
	emitter.Send(ok2)
	emitter.Send(`{"aep":"0.1","id":"bad-2","type":"tool.requested"}`)
	emitter.Send(`{"type":"ping","t":2}`)
	<-h.entered
	time.Sleep(50 * time.Millisecond)
	h.release()
	for _, id := range []string{"bad-1", "bad-2"} {
		if f := emitter.Next(); f.Str("type") != "error" || f.Str("code") != "invalid-event" || f.Str("event") != id {
			t.Fatalf("got %v, want invalid-event for %s", f, id)
		}
	}
	if f := emitter.Next(); f.Str("type") != "pong" {
		t.Fatalf("got %v, want the pong after both refusals", f)
	}
	for _, ev := range []string{ok1, ok2} {
		if b := consumer.NextFrame(); string(b) != ev {
			t.Fatalf("consumer got %s, want %s", b, ev)
		}
	}
}
