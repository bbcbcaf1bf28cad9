package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/coder/websocket"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/internal/aepclient"
)

// wsSender publishes each batch's events one WebSocket message per event,
// as an emitter that holds a connection does: dialect R on /socket after a
// hello as emitter, dialect D on /aep after session.opened. It holds one
// connection per worker (taken from idle, dialled when none is), so the
// events of one connection are in order and each connection has one batch
// in flight. A batch counts as answered when:
//
//   - D: every event got its event.acknowledged (accepted: in the log) or
//     event.rejected (rejected, or failed when retryable);
//   - R: a ping sent after the batch came back as pong. R answers an
//     accepted event with nothing, and the gateway answers the events read
//     before a ping (writing them pipelined) before the ping, so the pong
//     follows every event of the batch; an error frame naming an event is a
//     rejection (failed for "unavailable").
//
// A connection that fails is closed and the batch's unanswered events
// count as failed. Safe for concurrent use; close ends the idle
// connections.
type wsSender struct {
	c    *aepclient.Client
	d    aep.Dialect
	idle chan *websocket.Conn
}

func newWSSender(c *aepclient.Client, d aep.Dialect, workers int) *wsSender {
	return &wsSender{c: c, d: d, idle: make(chan *websocket.Conn, workers)}
}

func (s *wsSender) close() {
	for {
		select {
		case conn := <-s.idle:
			conn.Close(websocket.StatusNormalClosure, "")
		default:
			return
		}
	}
}

// open dials a connection and says hello as an emitter.
func (s *wsSender) open(ctx context.Context) (*websocket.Conn, error) {
	if s.d == aep.DialectD {
		conn, err := aepclient.DialWS(ctx, s.c, "/aep", []string{"aep-0.1"})
		if err != nil {
			return nil, err
		}
		session := "sess_bench_" + aepclient.NewDEnvelope("", "", nil).ID[4:]
		if err := aepclient.WriteJSONFrame(ctx, conn, aepclient.NewDEnvelope("session.opened", session, map[string]string{"session_id": session, "version": "0.1"})); err != nil {
			conn.CloseNow()
			return nil, err
		}
		for {
			f, _, err := aepclient.ReadFrame(ctx, conn)
			if err != nil {
				conn.CloseNow()
				return nil, fmt.Errorf("WebSocket, waiting for session.ready: %w", err)
			}
			switch f.Type {
			case "session.ready":
				return conn, nil
			case "session.error":
				conn.CloseNow()
				return nil, fmt.Errorf("session.error: %s (%w)", f.Payload, aepclient.ErrRefused)
			}
		}
	}
	conn, err := aepclient.DialWS(ctx, s.c, "/socket", nil)
	if err != nil {
		return nil, err
	}
	if err := aepclient.SayHelloR(ctx, conn, aepclient.RHello("emitter", "aepctl-bench")); err != nil {
		conn.CloseNow()
		return nil, err
	}
	return conn, nil
}

func (s *wsSender) send(ctx context.Context, b *loadBatch) outcome {
	n := len(b.lines)
	var conn *websocket.Conn
	select {
	case conn = <-s.idle:
	default:
		var err error
		if conn, err = s.open(ctx); err != nil {
			return outcome{failed: n, status: "error"}
		}
	}
	o, err := s.exchange(ctx, conn, b)
	if err != nil {
		conn.CloseNow()
		o.failed = n - o.accepted - o.rejected
		o.status = "error"
		return o
	}
	select {
	case s.idle <- conn:
	default:
		conn.Close(websocket.StatusNormalClosure, "")
	}
	o.status = "ws"
	return o
}

// benchPing is the R ping that closes a batch; its t tells it from a ping
// of the gateway's own.
var benchPing = []byte(`{"type":"ping","t":"aepctl-bench"}`)

// exchange writes the batch's events and reads the answers (see wsSender).
func (s *wsSender) exchange(ctx context.Context, conn *websocket.Conn, b *loadBatch) (outcome, error) {
	var o outcome
	for _, line := range b.lines {
		if err := conn.Write(ctx, websocket.MessageText, line); err != nil {
			return o, err
		}
	}
	if s.d != aep.DialectD {
		if err := conn.Write(ctx, websocket.MessageText, benchPing); err != nil {
			return o, err
		}
	}
	for answered := 0; ; {
		f, _, err := aepclient.ReadFrame(ctx, conn)
		if err != nil {
			return o, err
		}
		switch f.Type {
		case "event.acknowledged": // D
			o.accepted++
			answered++
		case "event.rejected": // D: this batch's events only ask for answers
			var p aepclient.DErrorPayload
			_ = json.Unmarshal(f.Payload, &p)
			if p.Error.Retryable {
				o.failed++
			} else {
				o.rejected++
			}
			answered++
		case "error": // R, naming an event
			if f.Code == "unavailable" {
				o.failed++
			} else {
				o.rejected++
			}
		case "ping": // R: the gateway's heartbeat
			if err := aepclient.PongR(ctx, conn, f); err != nil {
				return o, err
			}
		case "pong": // R: every event before the ping was handled
			if t, _ := strconv.Unquote(string(f.T)); t == "aepctl-bench" {
				o.accepted = len(b.lines) - o.rejected - o.failed
				return o, nil
			}
		}
		if s.d == aep.DialectD && answered == len(b.lines) {
			return o, nil
		}
	}
}
