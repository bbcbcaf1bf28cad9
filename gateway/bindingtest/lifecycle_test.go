package bindingtest

import (
	"context"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// An idle stream receives the binding's heartbeat within a few periods:
// SSE-D ": heartbeat", SSE-R ": ping", WS-D a WebSocket ping, WS-R a ping
// frame (answered, so a second one comes on the same connection).
func TestHeartbeat(t *testing.T) {
	forEach(t, func(t *testing.T, b binding) {
		const period = 200 * time.Millisecond
		s := newStack(t, b.mode, stackConfig{Heartbeat: period})
		st := b.open(t, s, openOpts{})
		start := time.Now()
		st.heartbeat(t)
		st.heartbeat(t)
		// A failure bound, not a timing assertion: two periods are
		// 400 ms; a heartbeat missing for seconds is a bug.
		if d := time.Since(start); d > 25*period {
			t.Fatalf("two heartbeats took %v with a %v period", d, period)
		}
	})
}

// shutdownBound bounds the gateway's shutdown with open streams: their
// handlers return without waiting for anything but their last writes.
const shutdownBound = 5 * time.Second

// Shutting the gateway down (main's order: drain, R close, D WebSocket
// shutdown, HTTP shutdown which closes the engine) ends every open stream
// with its dialect's closing signal, and returns within a bound: every
// handler returned (http.Server.Shutdown waits for the SSE handlers, the
// WebSocket bindings for theirs). "idle" streams last wrote longer ago
// than the write timeout when the shutdown starts.
func TestGracefulShutdown(t *testing.T) {
	for _, idle := range []bool{false, true} {
		t.Run(map[bool]string{false: "busy", true: "idle"}[idle], func(t *testing.T) {
			forEach(t, func(t *testing.T, b binding) {
				testShutdown(t, b, idle)
			})
		})
	}
}

func testShutdown(t *testing.T, b binding, idle bool) {
	// Busy: the default write timeout (seconds), longer than the test
	// takes from the last event to the shutdown; idle: a short one.
	var writeTimeout time.Duration
	if idle {
		writeTimeout = 200 * time.Millisecond
	}
	s := newStack(t, b.mode, stackConfig{WriteTimeout: writeTimeout})
	const session = "sess_shut"
	var streams []stream
	for range 3 {
		streams = append(streams, b.open(t, s, openOpts{session: session, lossless: true, ahead: 64}))
	}
	publish(t, s, b.dialect, session, 0, 2, 0)
	for _, st := range streams {
		expectSeqs(t, events(t, st, 2), session, 0, 2)
	}
	if idle {
		time.Sleep(3 * writeTimeout) // the precondition: no write for longer than the write timeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownBound)
	defer cancel()
	start := time.Now()
	if err := s.shutdown(ctx); err != nil {
		t.Fatalf("shutdown after %v: %v", time.Since(start), err)
	}
	t.Logf("shutdown with %d open streams took %v", len(streams), time.Since(start))
	for i, st := range streams {
		rest, how := st.end(t, shutdownBound)
		for _, m := range rest {
			if m.kind == kindEvent {
				t.Fatalf("stream %d: event after shutdown: %s", i, m.raw)
			}
		}
		if how != b.closing {
			t.Fatalf("stream %d ended with %q, want %q", i, how, b.closing)
		}
	}
}

// A client that stopped reading does not hold the shutdown beyond the
// write timeout: the gateway gives up on it, ends the other streams with
// their closing signal, and every handler returns within the bound.
func TestShutdownWithStalledClient(t *testing.T) {
	forEach(t, func(t *testing.T, b binding) {
		needSmallSockets(t)
		socks := &gatewaytest.SmallSockets{Bytes: slowSocket}
		const writeTimeout = 500 * time.Millisecond
		s := newStack(t, b.mode, stackConfig{Queue: slowQueue, Outbound: slowOutbound, Batch: slowBatch, WriteTimeout: writeTimeout, Sockets: socks})
		const session = "sess_stall"
		stalled := b.open(t, s, openOpts{session: session, lossless: true, slow: socks})
		healthy := b.open(t, s, openOpts{session: session, lossless: true, ahead: 400})
		waitJoined(t, s)
		publish(t, s, b.dialect, session, 0, 300, slowPad)
		expectSeqs(t, events(t, healthy, 300), session, 0, 300)
		gatewaytest.Poll(t, "the stalled stream to fall back", func() bool { return metric(t, s, "aep_delivery_fallbacks_total") > 0 })
		ctx, cancel := context.WithTimeout(context.Background(), shutdownBound)
		defer cancel()
		start := time.Now()
		if err := s.shutdown(ctx); err != nil {
			t.Fatalf("shutdown after %v: %v", time.Since(start), err)
		}
		t.Logf("shutdown with a stalled client took %v (write timeout %v)", time.Since(start), writeTimeout)
		_, healthyEnd := healthy.end(t, shutdownBound)
		socks.Grow()
		// What the stalled stream still gets is events in order, then its
		// end (its closing signal may have been cut by the write timeout).
		rest, how := stalled.end(t, shutdownBound)
		last := -1
		for _, m := range rest {
			if m.kind == kindEvent {
				if m.seq <= last {
					t.Fatalf("stalled stream: seq %d after %d", m.seq, last)
				}
				last = m.seq
			}
		}
		t.Logf("stalled stream: %d messages after shutdown, ended with %q", len(rest), how)
		if healthyEnd != b.closing {
			t.Fatalf("healthy stream ended with %q, want %q", healthyEnd, b.closing)
		}
	})
}
