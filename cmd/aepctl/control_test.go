package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/internal/aepclient"
	"github.com/aep-gateway/aep-gateway/internal/clitest"
	"github.com/coder/websocket"
)

// waitClaim polls the roster of the gateway at url until session is
// claimed (a claim is live once the roster lists it).
func waitClaim(t testing.TB, ctx context.Context, url, session string) {
	t.Helper()
	c, _, err := websocket.Dial(ctx, strings.Replace(url, "http", "ws", 1)+"/socket", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if err := aepclient.SayHelloR(ctx, c, aepclient.RHello("consumer", "test")); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if err := aepclient.WriteJSONFrame(ctx, c, map[string]string{"type": "roster", "id": fmt.Sprint("r", i)}); err != nil {
			t.Fatal(err)
		}
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), `"session":"`+session+`"`) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serveTarget runs an aepctl target of session until the test ends.
func serveTarget(t testing.TB, g *clitest.Gateway, session string, accepts ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tg, err := DialTarget(ctx, TargetOptions{URL: g.URL, Session: session, Run: "r-1", Agent: "tgt", Instance: "i",
		Accepts: accepts, AckWindow: 10 * time.Second}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- tg.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	waitClaim(t, ctx, g.URL, session)
}

// control runs "aepctl control ARGS -o json" and returns the exit code and
// the result it printed.
func control(t *testing.T, g *clitest.Gateway, args ...string) (int, ControlResult) {
	t.Helper()
	var out, errw bytes.Buffer
	code := run(context.Background(), append([]string{"control", "--url", g.URL, "-o", "json"}, args...), nil, &out, &errw)
	var res ControlResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("control %v: exit %d, output %q, stderr %q", args, code, out.String(), errw.String())
	}
	return code, res
}

// aepctl control → gateway → aepctl target → ack back: accepted with the
// outcome; a second cancel of the ended run is the target's nack; a type
// the target did not declare, and a session nobody claims, are the
// gateway's refusals.
func TestControlAckNackRefusal(t *testing.T) {
	g := newRelayGateway(t)
	serveTarget(t, g, "s-ctl", "control.cancel")

	code, res := control(t, g, "cancel", "--session", "s-ctl", "--run", "r-1", "--outcome", "10s", "--id", "cmd-1")
	var outcome struct{ Type, Cause string }
	_ = json.Unmarshal(res.Outcome, &outcome)
	if code != exitOK || res.Result != resultAccepted || res.Command != "cmd-1" || res.Attempts != 1 ||
		outcome.Type != "run.cancelled" || outcome.Cause != "cmd-1" {
		t.Fatalf("first cancel: exit %d, %+v (outcome %s)", code, res, res.Outcome)
	}
	var ack struct{ Type, Cause, Session string }
	if err := json.Unmarshal(res.Ack, &ack); err != nil || ack.Type != "control.accepted" || ack.Cause != "cmd-1" || ack.Session != "s-ctl" {
		t.Fatalf("ack %s: %v", res.Ack, err)
	}

	code, res = control(t, g, "cancel", "--session", "s-ctl", "--run", "r-1")
	if code != exitNack || res.Result != resultRejected || res.Reason != "invalid" || res.Ack == nil {
		t.Fatalf("second cancel: exit %d, %+v", code, res)
	}
	code, res = control(t, g, "pause", "--session", "s-ctl")
	if code != exitNack || res.Result != resultRefused || res.Reason != "unsupported" || res.Ack != nil {
		t.Fatalf("undeclared pause: exit %d, %+v", code, res)
	}
	code, res = control(t, g, "cancel", "--session", "s-nobody")
	if code != exitNack || res.Result != resultRefused || res.Reason != "no-route" {
		t.Fatalf("unclaimed session: exit %d, %+v", code, res)
	}
}

// A target that never answers: each attempt's window passes, the same
// command is sent again, and the result is a timeout (exit 4) after
// --attempts sends.
func TestControlTimeout(t *testing.T) {
	g := newRelayGateway(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Claimed, never served: commands reach it and stay unanswered.
	tg, err := DialTarget(ctx, TargetOptions{URL: g.URL, Session: "s-mute", Run: "r", Agent: "mute", Instance: "i",
		Accepts: []string{"control.pause"}, AckWindow: time.Second}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.ws.CloseNow()
	waitClaim(t, ctx, g.URL, "s-mute")

	code, res := control(t, g, "pause", "--session", "s-mute", "--timeout", "300ms", "--attempts", "2")
	if code != exitTimeout || res.Result != resultTimeout || res.Attempts != 2 || res.ElapsedMS < 600 {
		t.Fatalf("exit %d, %+v", code, res)
	}
	var text bytes.Buffer
	if code := run(context.Background(), []string{"control", "pause", "--url", g.URL, "--session", "s-mute", "--timeout", "200ms"}, nil, &text, io.Discard); code != exitTimeout ||
		!strings.Contains(text.String(), "timeout") {
		t.Fatalf("text output: exit %d, %q", code, text.String())
	}
}

// Usage errors exit 2 before anything is sent.
func TestControlUsage(t *testing.T) {
	for _, args := range [][]string{
		{"cancel"},                 // no --session
		{"--session", "s"},         // no COMMAND
		{"stop", "--session", "s"}, // not a command type
		{"cancel", "--session", "s", "--scope", "x"}, // bad scope
		{"respond", "--session", "s"},                // respond without subject/answer
		{"cancel", "--session", "s", "--data", "[1]"},
		{"cancel", "--session", "s", "--attempts", "0"},
	} {
		if code := run(context.Background(), append([]string{"control", "--url", "http://127.0.0.1:1"}, args...), nil, io.Discard, io.Discard); code != exitUsage {
			t.Errorf("control %v: exit %d, want %d", args, code, exitUsage)
		}
	}
}

// aepctl target -o json: one object per line, ready first, then each
// command with its answer.
func TestTargetJSONLog(t *testing.T) {
	g := newRelayGateway(t)
	ctx, cancel := context.WithCancel(context.Background())
	var log syncBuffer
	tg, err := DialTarget(ctx, TargetOptions{URL: g.URL, Session: "s-j", Run: "r-1", Agent: "tgt", Instance: "i",
		Accepts: []string{"control.cancel"}, AckWindow: time.Second, JSON: true}, &log)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- tg.Serve(ctx) }()
	defer func() {
		cancel()
		<-served //nolint:errcheck // the target's end after cancel; its errors are not what this test checks
	}()
	waitClaim(t, ctx, g.URL, "s-j")
	if code, res := control(t, g, "cancel", "--session", "s-j", "--run", "r-1", "--id", "c-j"); code != exitOK {
		t.Fatalf("cancel: exit %d, %+v", code, res)
	}
	var notes []targetNote
	for _, l := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		var n targetNote
		if err := json.Unmarshal([]byte(l), &n); err != nil {
			t.Fatalf("not a JSON line: %q", l)
		}
		notes = append(notes, n)
	}
	if len(notes) != 2 || notes[0].Event != "ready" || notes[0].Session != "s-j" ||
		notes[1].Event != "command" || notes[1].Command != "c-j" || notes[1].Answer != "control.accepted" {
		t.Fatalf("log: %+v", notes)
	}
}
