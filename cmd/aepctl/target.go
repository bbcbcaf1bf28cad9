package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/oklog/ulid/v2"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/internal/aepclient"
	"github.com/aep-gateway/aep-gateway/internal/cli"
)

// TargetOptions configure a control-capable test target (AEP-0004 §7).
type TargetOptions struct {
	URL, Token string
	Session    string   // the session it claims
	Run        string   // the run it starts (control.cancel's target)
	Agent      string   // hello identity and envelope agent
	Instance   string   // hello identity.instance
	Accepts    []string // declared control.accepts
	AckWindow  time.Duration
	// Remember bounds the commands whose recorded ack is kept for
	// retransmits (the dedupe state, §2.3).
	Remember int
	// JSON reports each line of the log as a JSON object (targetNote)
	// instead of text.
	JSON bool
}

// targetNote is one line of a target's log: ready, command (a new
// command and its ack), again (a retransmit re-acknowledged) or
// gateway_error (an error frame from the relay).
type targetNote struct {
	Event   string   `json:"event"`
	Session string   `json:"session,omitempty"`
	Run     string   `json:"run,omitempty"`
	Accepts []string `json:"accepts,omitempty"`
	Command string   `json:"command,omitempty"` // its id
	Type    string   `json:"type,omitempty"`
	Source  string   `json:"source,omitempty"`
	Answer  string   `json:"answer,omitempty"` // control.accepted, or control.rejected (reason)
	Code    string   `json:"code,omitempty"`
	Detail  string   `json:"detail,omitempty"`
	About   string   `json:"about,omitempty"` // gateway_error: the event it names
}

// note writes n to the log, as text or JSON.
func (t *Target) note(n targetNote) {
	if t.opt.JSON {
		_ = cli.WriteJSONLine(t.log, n)
		return
	}
	switch n.Event {
	case "ready":
		fmt.Fprintf(t.log, "target ready: session %s run %s accepts %s\n", n.Session, n.Run, strings.Join(n.Accepts, ","))
	case "gateway_error":
		fmt.Fprintf(t.log, "gateway error %s: %s %s\n", n.Code, n.Detail, n.About)
	case "again":
		fmt.Fprintf(t.log, "command %s %s again: re-acknowledged\n", n.Type, n.Command)
	default:
		fmt.Fprintf(t.log, "command %s %s from %s: %s\n", n.Type, n.Command, n.Source, n.Answer)
	}
}

// Target is a control-capable emitter on /socket: it claims a session,
// declares control.accepts, and answers every command addressed to it with
// exactly one ack decision (control.accepted or control.rejected, cause =
// the command's id), re-emitting the recorded ack byte-identically when a
// command is retransmitted; control.cancel of its run is followed by
// run.cancelled, cause-linked to the command. Events go out on the same
// connection, so they are ordinary sequenced events of the session.
type Target struct {
	opt    TargetOptions
	ws     *websocket.Conn
	log    io.Writer
	source string

	seq     int64 // next seq; writer goroutine only (serialised by mu)
	mu      sync.Mutex
	runDone bool
	acks    map[string][]byte // (source \x00 id) -> the recorded ack
	order   []string          // acks keys, oldest first
}

// DialTarget connects, says hello as a control-capable emitter, and
// claims the session by emitting session.started and run.started.
func DialTarget(ctx context.Context, opt TargetOptions, log io.Writer) (*Target, error) {
	if opt.Remember <= 0 {
		opt.Remember = 4096
	}
	ws, err := aepclient.DialWS(ctx, &aepclient.Client{BaseURL: opt.URL, Token: opt.Token}, "/socket", nil)
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	ws.SetReadLimit(4 << 20)
	t := &Target{opt: opt, ws: ws, log: log, acks: map[string][]byte{},
		source: "aep://aepctl/agent/" + opt.Agent + "/session/" + opt.Session}
	hello := aepclient.RHello("emitter", opt.Agent)
	hello["identity"] = map[string]string{"agent": opt.Agent, "instance": opt.Instance}
	hello["capabilities"] = map[string]any{
		"emits":   []string{"session", "run", "control"},
		"control": map[string]any{"accepts": opt.Accepts, "ack_window_ms": opt.AckWindow.Milliseconds()},
	}
	if err := aepclient.SayHelloR(ctx, ws, hello); err != nil {
		ws.CloseNow()
		return nil, fmt.Errorf("target: %w", err)
	}
	for _, ev := range [][]byte{
		t.event("session.started", map[string]any{"label": "aepctl target"}, nil),
		t.event("run.started", map[string]any{"trigger": "user"}, map[string]any{"run": opt.Run}),
	} {
		if err := t.write(ctx, ev); err != nil {
			ws.CloseNow()
			return nil, err
		}
	}
	t.note(targetNote{Event: "ready", Session: opt.Session, Run: opt.Run, Accepts: opt.Accepts})
	return t, nil
}

// Serve answers commands until ctx ends or the connection does.
func (t *Target) Serve(ctx context.Context) error {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-ctx.Done():
			_ = t.ws.Close(websocket.StatusNormalClosure, "target stopping")
		case <-done:
		}
	}()
	defer func() {
		close(done)
		wg.Wait()
		t.ws.CloseNow()
	}()
	for {
		_, b, err := t.ws.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("target: %w", err)
		}
		if err := t.handle(ctx, b); err != nil {
			return err
		}
	}
}

// command is what the target reads of a command.
type command struct {
	ID, Type, Source, Session, Run string
	Data                           struct{ Scope string }
}

func (t *Target) handle(ctx context.Context, b []byte) error {
	var f struct {
		Type, Code, Detail, Cause, Event string
		T                                json.RawMessage
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil //nolint:nilerr // a frame that is not JSON is not for the target: skipped
	}
	switch {
	case f.Type == "ping":
		return t.write(ctx, mustJSON(map[string]any{"type": "pong", "t": f.T}))
	case f.Type == "error":
		t.note(targetNote{Event: "gateway_error", Code: f.Code, Detail: f.Detail, About: f.Event})
		return nil
	case !aep.IsCommandR(f.Type):
		return nil
	}
	var cmd command
	if err := json.Unmarshal(b, &cmd); err != nil || cmd.ID == "" || cmd.Session != t.opt.Session {
		return nil //nolint:nilerr // not a command for this session: skipped
	}
	key := cmd.Source + "\x00" + cmd.ID
	t.mu.Lock()
	recorded, seen := t.acks[key]
	t.mu.Unlock()
	if seen {
		t.note(targetNote{Event: "again", Command: cmd.ID, Type: cmd.Type, Source: cmd.Source})
		return t.write(ctx, recorded)
	}
	ack, outcome := t.decide(&cmd)
	t.remember(key, ack)
	t.note(targetNote{Event: "command", Command: cmd.ID, Type: cmd.Type, Source: cmd.Source, Answer: ackType(ack)})
	if err := t.write(ctx, ack); err != nil {
		return err
	}
	if outcome != nil {
		return t.write(ctx, outcome)
	}
	return nil
}

// decide makes the one ack decision of a new command, and its outcome
// event when it has one.
func (t *Target) decide(cmd *command) (ack, outcome []byte) {
	cause := map[string]any{"cause": cmd.ID}
	reject := func(reason, detail string) []byte {
		return t.event("control.rejected", map[string]any{"reason": reason, "detail": detail}, cause)
	}
	if !slices.Contains(t.opt.Accepts, cmd.Type) {
		return reject(aep.CodeRUnsupported, cmd.Type+" is not in control.accepts"), nil
	}
	switch cmd.Type {
	case "control.cancel":
		t.mu.Lock()
		done := t.runDone
		mine := cmd.Data.Scope == "session" || cmd.Run == t.opt.Run
		if mine && !done {
			t.runDone = true
		}
		t.mu.Unlock()
		if !mine {
			return reject(aep.CodeRNackInvalid, "this target runs "+t.opt.Run+", not "+cmd.Run), nil
		}
		if done {
			return reject(aep.CodeRNackInvalid, "run "+t.opt.Run+" has ended"), nil
		}
		ack = t.event("control.accepted", map[string]any{}, cause)
		outcome = t.event("run.cancelled", map[string]any{"by": "control"}, map[string]any{"cause": cmd.ID, "run": t.opt.Run})
		return ack, outcome
	default:
		// control.attention.respond of a subject this target never asked
		// about, pause, resume, vendor commands: accepted, nothing to do.
		return t.event("control.accepted", map[string]any{}, cause), nil
	}
}

// remember records an ack for retransmits, forgetting the oldest past
// Remember.
func (t *Target) remember(key string, ack []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.acks[key] = ack
	t.order = append(t.order, key)
	if len(t.order) > t.opt.Remember {
		delete(t.acks, t.order[0])
		t.order = t.order[1:]
	}
}

// event is the next event of the session, its bytes fixed once.
func (t *Target) event(typ string, data, extra map[string]any) []byte {
	t.mu.Lock()
	seq := t.seq
	t.seq++
	t.mu.Unlock()
	ev := map[string]any{
		"aep": "0.1", "id": ulid.MustNew(ulid.Now(), rand.Reader).String(), "type": typ,
		"time": time.Now().UTC().Format(time.RFC3339Nano), "source": t.source, "agent": t.opt.Agent,
		"session": t.opt.Session, "seq": seq, "data": data,
	}
	for k, v := range extra {
		ev[k] = v
	}
	return mustJSON(ev)
}

func (t *Target) write(ctx context.Context, b []byte) error {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := t.ws.Write(wctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("target: write: %w", err)
	}
	return nil
}

func ackType(b []byte) string {
	var a struct {
		Type string
		Data struct{ Reason string }
	}
	_ = json.Unmarshal(b, &a)
	if a.Data.Reason != "" {
		return a.Type + " (" + a.Data.Reason + ")"
	}
	return a.Type
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(errors.New("target: frame does not marshal: " + err.Error()))
	}
	return b
}
