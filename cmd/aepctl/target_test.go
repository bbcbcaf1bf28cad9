package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/dialectr"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/internal/clitest"
)

// newRelayGateway is a gateway on kfake with the dialect R relay mounted
// (control routing on), served over a real socket.
func newRelayGateway(t testing.TB) *clitest.Gateway {
	t.Helper()
	st := gatewaytest.New(t, gatewaytest.Options{Partitions: 2})
	st.Server.Start()
	opts := []kgo.Opt{st.Seeds, kgo.FetchMaxWait(100 * time.Millisecond)}
	eng, err := engine.NewEngine(engine.Config{ClientOpts: opts, Topics: st.Provisioner, Logger: zerolog.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	rl, err := dialectr.New(dialectr.Config{Engine: eng, Ingest: st.Server.IngestFunc(aep.DialectR), ClientOpts: opts,
		Topics: st.Provisioner, Authenticated: true, Logger: zerolog.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	st.Server.Mount(aep.DialectR, "/socket", rl.Socket())
	hs := httptest.NewServer(st.Server.Handler())
	t.Cleanup(func() {
		_ = rl.Shutdown(context.Background())
		hs.CloseClientConnections()
		hs.Close()
		eng.Close()
	})
	return clitest.Of(t, st.Cluster, st.Client, hs.URL)
}

// The target claims its session, acks each command once with cause = the
// command id, re-emits the recorded ack byte for byte on a retransmit, and
// follows an accepted control.cancel of its run with run.cancelled.
func TestTargetAnswersCommands(t *testing.T) {
	g := newRelayGateway(t)
	ctx, cancel := context.WithCancel(context.Background())
	var log bytes.Buffer
	tg, err := DialTarget(ctx, TargetOptions{URL: g.URL, Session: "s-t", Run: "r-1", Agent: "tgt", Instance: "i",
		Accepts: []string{"control.attention.respond", "control.cancel"}, AckWindow: 10 * time.Second}, &log)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- tg.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	sender, _, err := websocket.Dial(ctx, strings.Replace(g.URL, "http", "ws", 1)+"/socket", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.CloseNow()
	send := func(s string) {
		t.Helper()
		if err := sender.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"type":"hello","versions":["0.1"],"role":"consumer"}`)
	if _, _, err := sender.Read(ctx); err != nil {
		t.Fatal(err)
	}
	waitClaim(t, ctx, g.URL, "s-t")
	cmd := func(id, typ string, extra string) string {
		return fmt.Sprintf(`{"aep":"0.1","id":%q,"type":%q,"time":"2026-07-03T10:14:00Z","source":"aep://ops/agent/ops","agent":"ops","session":"s-t"%s}`, id, typ, extra)
	}
	respond := cmd("c-1", "control.attention.respond", `,"subject":"q","data":{"answer":{"option":"yes"}}`)
	send(respond)
	send(respond) // a retransmit
	send(cmd("c-2", "control.cancel", `,"run":"r-1","data":{"scope":"run"}`))
	send(cmd("c-3", "control.cancel", `,"run":"r-1","data":{"scope":"run"}`)) // the run has ended

	// The events topic: the target's events and the commands, in order.
	vals := g.ReadValues(clitest.DevTopic, 2+1+1+1+2+1+1)
	var got, cmds []string
	acks := map[string][]string{}
	for _, v := range vals {
		var ev struct {
			Type, ID, Cause, Run string
			Data                 struct{ Reason string }
		}
		if err := json.Unmarshal(v, &ev); err != nil {
			t.Fatal(err)
		}
		s := ev.Type
		if aep.IsCommandR(ev.Type) {
			cmds = append(cmds, ev.ID)
			continue
		}
		if ev.Cause != "" {
			s += "<" + ev.Cause
			if ev.Type != "run.cancelled" {
				acks[ev.Cause] = append(acks[ev.Cause], string(v))
			}
		}
		if ev.Data.Reason != "" {
			s += "(" + ev.Data.Reason + ")"
		}
		got = append(got, s)
	}
	// The commands are in the history once each (the retransmit is not
	// written again), and so is the target's re-acknowledgement of the
	// retransmit: it is the same event (same source and id), which the
	// gateway's idempotency window writes once (docs/operations.md §7); the
	// target's events are in its order.
	want := "[session.started run.started control.accepted<c-1 control.accepted<c-2 run.cancelled<c-2 control.rejected<c-3(invalid)]"
	if fmt.Sprint(got) != want || fmt.Sprint(cmds) != "[c-1 c-2 c-3]" {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		defer rcancel()
		for {
			_, b, err := sender.Read(rctx)
			if err != nil {
				break
			}
			t.Logf("sender got %s", b)
		}
		t.Fatalf("events %v, commands %v\nwant %s, [c-1 c-2 c-3]\ntarget log:\n%s", got, cmds, want, log.String())
	}
	// The target did re-acknowledge (its log), and the re-acknowledgement
	// was the same event: a new id would have been a second record.
	if a := acks["c-1"]; len(a) != 1 || !strings.Contains(log.String(), "c-1 again: re-acknowledged") {
		t.Errorf("acks of c-1 %q, target log:\n%s", a, log.String())
	}
}

// A command outside the declared accepts is nacked unsupported by the
// target itself (when no relay nacked it first).
func TestTargetNacksUndeclared(t *testing.T) {
	tg := &Target{opt: TargetOptions{Session: "s", Run: "r", Agent: "a", Accepts: []string{"control.cancel"}}, acks: map[string][]byte{},
		source: "aep://aepctl/agent/a/session/s"}
	ack, outcome := tg.decide(&command{ID: "c", Type: "control.pause", Session: "s"})
	var ev struct {
		Type, Cause string
		Seq         int64
		Data        struct{ Reason string }
	}
	if err := json.Unmarshal(ack, &ev); err != nil || outcome != nil {
		t.Fatalf("ack %s outcome %s: %v", ack, outcome, err)
	}
	if ev.Type != "control.rejected" || ev.Cause != "c" || ev.Data.Reason != aep.CodeRUnsupported {
		t.Fatalf("got %s, want control.rejected (unsupported) caused by c", ack)
	}
	if _, err := aep.ParseAs(aep.DialectR, ack, aep.Limits{ValidatePayloads: true}); err != nil {
		t.Fatalf("the nack is not a valid event: %v", err)
	}
}
