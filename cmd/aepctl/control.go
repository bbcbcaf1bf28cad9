package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aep-gateway/aep-gateway/internal/aepclient"
	"github.com/coder/websocket"
	"github.com/oklog/ulid/v2"
)

// ControlOptions say which AEP-0004 command to send and how long to wait
// for its acknowledgement.
type ControlOptions struct {
	Type    string // control.cancel, control.pause, ..., x.{vendor}.control.{verb}
	Session string // the target session (required)
	Run     string // the target run; "" means none
	Agent   string // the sender: envelope agent and hello identity
	ID      string // the idempotency key, reused on every attempt; "" means a new ULID
	Cause   string // the event that prompted the command (§6); "" means none
	Subject string // control.attention.respond: the attention.requested id
	Data    json.RawMessage
	// Window is the ack window of one attempt (AEP-0004 §3, default 10 s).
	Window time.Duration
	// Attempts is how many times the same command (same id and source) is
	// sent when its window passes in silence; zero means 1.
	Attempts int
	// Outcome, when positive, is how long to wait after an accept for the
	// outcome event (cause = the command's or the ack's id).
	Outcome time.Duration
}

// Control results.
const (
	resultAccepted = "accepted" // control.accepted from the target
	resultRejected = "rejected" // control.rejected from the target (a nack)
	resultRefused  = "refused"  // the relay's cause-matched error frame (no-route, ...)
	resultTimeout  = "timeout"  // silence past the window of every attempt
)

// ControlResult is what became of a command.
type ControlResult struct {
	Command   string          `json:"command"` // its id
	Type      string          `json:"type"`
	Session   string          `json:"session"`
	Result    string          `json:"result"`           // accepted, rejected, refused or timeout
	Reason    string          `json:"reason,omitempty"` // rejected: the ack's reason; refused: the relay's code
	Detail    string          `json:"detail,omitempty"`
	Attempts  int             `json:"attempts"`
	ElapsedMS float64         `json:"elapsed_ms"` // first send to the answer
	Ack       json.RawMessage `json:"ack,omitempty"`
	Outcome   json.RawMessage `json:"outcome,omitempty"`
}

// Errors of a command that was not accepted (exit codes 3 and 4).
var (
	errNacked   = errors.New("command not accepted")
	errTimedOut = errors.New("no acknowledgement within the ack window")
)

const controlSubID = "aepctl-control"

// refusedUnavailable is the gateway's refusal when Kafka failed on the
// command's path (docs/relay.md): the one refusal a retry can cure.
const refusedUnavailable = "unavailable"

// SendControl connects to /socket (role both), subscribes to the target
// session from now, sends the command and waits for the one answer that
// settles it: the target's ack or nack (cause = the command's id), the
// relay's refusal on the target's behalf, or silence past the window of
// every attempt. A retry resends the same bytes (same id, same source),
// so the target dedupes it and re-emits its recorded ack (§2.3, §3).
func SendControl(ctx context.Context, c *aepclient.Client, opt ControlOptions) (ControlResult, error) {
	opt = opt.withDefaults()
	cmd, err := commandEvent(opt)
	if err != nil {
		return ControlResult{}, err
	}
	res := ControlResult{Command: opt.ID, Type: opt.Type, Session: opt.Session}
	conn, err := aepclient.DialWS(ctx, c, "/socket", nil)
	if err != nil {
		return res, err
	}
	defer conn.CloseNow()
	sctx, cancel := context.WithTimeout(ctx, aepclient.WSSetupTimeout)
	err = aepclient.SayHelloR(sctx, conn, aepclient.RHello("both", opt.Agent))
	if err == nil {
		filter, _ := json.Marshal(map[string]string{"session": opt.Session})
		err = aepclient.SubscribeR(sctx, conn, controlSubID, aepclient.StreamSpec{RFilter: filter})
	}
	cancel()
	if err != nil {
		return res, err
	}
	frames := readFrames(ctx, conn)
	defer frames.stop()
	start := time.Now()
	for res.Attempts < opt.Attempts {
		res.Attempts++
		if err := conn.Write(ctx, websocket.MessageText, cmd); err != nil {
			return res, fmt.Errorf("send the command: %w", err)
		}
		wctx, cancel := context.WithTimeout(ctx, opt.Window)
		ack, err := awaitAck(wctx, conn, frames.c, opt.ID, &res)
		cancel()
		res.ElapsedMS = float64(time.Since(start).Microseconds()) / 1000
		switch {
		case err == nil && res.Result == resultAccepted && opt.Outcome > 0:
			// The outcome is extra: its absence (or the connection
			// ending meanwhile) leaves the accept as it is.
			octx, cancel := context.WithTimeout(ctx, opt.Outcome)
			res.Outcome, _ = awaitOutcome(octx, conn, frames.c, opt.ID, ack)
			cancel()
			return res, nil
		case err == nil && res.Result == resultRefused && res.Reason == refusedUnavailable && res.Attempts < opt.Attempts:
			// Kafka failed on the gateway: send again with the same id.
			if !aepclient.SleepCtx(ctx, min(opt.Window, time.Second)) {
				return res, ctx.Err()
			}
		case err == nil:
			return res, nil
		case ctx.Err() != nil:
			return res, ctx.Err()
		case wctx.Err() == nil:
			return res, err
		}
	}
	res.Result, res.Reason = resultTimeout, resultTimeout
	res.Detail = fmt.Sprintf("no acknowledgement within %v (%d attempt(s))", opt.Window, res.Attempts)
	return res, nil
}

// readFrame's results, in order.
type readResult struct {
	f   aepclient.Frame
	b   []byte
	err error
}

// frameReader owns the goroutine that reads a connection: a read with a
// deadline would close it (coder/websocket), so the waits time out on the
// channel instead. The channel closes after the first read error.
type frameReader struct {
	c      <-chan readResult
	cancel context.CancelFunc
	conn   *websocket.Conn
	done   chan struct{}
}

func readFrames(ctx context.Context, conn *websocket.Conn) *frameReader {
	ctx, cancel := context.WithCancel(ctx)
	c := make(chan readResult, 16)
	r := &frameReader{c: c, cancel: cancel, conn: conn, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		defer close(c)
		for {
			f, b, err := aepclient.ReadFrame(ctx, conn)
			select {
			case c <- readResult{f, b, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return r
}

// stop closes the connection and waits for the reader to end. What the
// reader still queues is drained meanwhile, so the reader keeps reading
// and sees the peer's close frame (Close waits for it).
func (r *frameReader) stop() {
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for range r.c { // until the reader closes c
		}
	}()
	_ = r.conn.Close(websocket.StatusNormalClosure, "aepctl done")
	r.cancel()
	<-r.done
	<-drained
}

// next is the next frame, answering pings on the way.
func next(ctx context.Context, conn *websocket.Conn, frames <-chan readResult) (aepclient.Frame, []byte, error) {
	for {
		select {
		case <-ctx.Done():
			return aepclient.Frame{}, nil, ctx.Err()
		case r, ok := <-frames:
			switch {
			case !ok:
				return aepclient.Frame{}, nil, errors.New("the connection ended")
			case r.err != nil:
				return aepclient.Frame{}, nil, aepclient.WSEnd(ctx, r.err)
			case r.f.Type == "ping":
				if err := aepclient.PongR(ctx, conn, r.f); err != nil {
					return aepclient.Frame{}, nil, err
				}
			default:
				return r.f, r.b, nil
			}
		}
	}
}

func (o ControlOptions) withDefaults() ControlOptions {
	if o.ID == "" {
		o.ID = ulid.MustNew(ulid.Now(), rand.Reader).String()
	}
	if o.Agent == "" {
		o.Agent = "aepctl"
	}
	if o.Window <= 0 {
		o.Window = 10 * time.Second
	}
	if o.Attempts <= 0 {
		o.Attempts = 1
	}
	if len(o.Data) == 0 {
		o.Data = json.RawMessage("{}")
	}
	return o
}

// commandEvent is the command's envelope, its bytes fixed once so a retry
// is byte-identical. Commands carry no seq (AEP-0004 §2.2).
func commandEvent(opt ControlOptions) ([]byte, error) {
	ev := map[string]any{
		"aep": "0.1", "id": opt.ID, "type": opt.Type, "time": time.Now().UTC().Format(time.RFC3339Nano),
		"source": "aep://aepctl/agent/" + opt.Agent, "agent": opt.Agent, "session": opt.Session, "data": opt.Data,
	}
	for k, v := range map[string]string{"run": opt.Run, "cause": opt.Cause, "subject": opt.Subject} {
		if v != "" {
			ev[k] = v
		}
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("command: %w", err)
	}
	return b, nil
}

// ackEvent is what settles a command among the session's events.
type ackEvent struct {
	ID, Type, Cause string
	Data            struct{ Reason, Detail string }
}

// awaitAck reads frames until the answer to command id, filling res, and
// returns the ack's id. Other frames of the session are skipped; a relay
// error not caused by the command ends the wait with an error.
func awaitAck(ctx context.Context, conn *websocket.Conn, frames <-chan readResult, id string, res *ControlResult) (string, error) {
	for {
		f, b, err := next(ctx, conn, frames)
		if err != nil {
			return "", fmt.Errorf("waiting for the ack: %w", err)
		}
		switch f.Type {
		case "closing":
			return "", fmt.Errorf("the gateway closed the connection: %s", b)
		case "error":
			if f.Cause != id {
				return "", fmt.Errorf("relay error %s: %s", f.Code, f.Detail)
			}
			res.Result, res.Reason, res.Detail = resultRefused, f.Code, f.Detail
			return "", nil
		case "control.accepted", "control.rejected":
			var ev ackEvent
			if json.Unmarshal(b, &ev) != nil || ev.Cause != id {
				continue
			}
			res.Result, res.Ack = resultAccepted, b
			if ev.Type == "control.rejected" {
				res.Result, res.Reason, res.Detail = resultRejected, ev.Data.Reason, ev.Data.Detail
			}
			return ev.ID, nil
		}
	}
}

// awaitOutcome reads the session's events until one, other than an ack,
// whose cause is the command or its ack (AEP-0004 §6).
func awaitOutcome(ctx context.Context, conn *websocket.Conn, frames <-chan readResult, id, ackID string) (json.RawMessage, error) {
	for {
		f, b, err := next(ctx, conn, frames)
		if err != nil {
			return nil, fmt.Errorf("waiting for the outcome: %w", err)
		}
		var ev ackEvent
		if f.Type == "control.accepted" || f.Type == "control.rejected" || json.Unmarshal(b, &ev) != nil {
			continue
		}
		if ev.Cause != "" && (ev.Cause == id || ev.Cause == ackID) {
			return b, nil
		}
	}
}
