package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/aep-gateway/aep-gateway/internal/cli"
)

func cmdTarget(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepctl", "target", "target --session S [--run R] [--accepts T,T] [--agent A] [--url URL] [--token KEY] [--output text|json]", stdout, stderr,
		"A control-capable AEP-0004 target on /socket for tests and wiring: claims the session,\nacks each command once, re-sends the recorded ack on a retransmit, answers an accepted\ncontrol.cancel of its run with run.cancelled. Prints \"target ready\" and one line per\ncommand (--output json: one object per line, {event, ...}) until interrupted.\n")
	var conn cli.ConnFlags
	conn.Register(fs)
	session := fs.String("session", "", "the session this target claims (required)")
	run := fs.String("run", "run-1", "the run it starts; control.cancel of it is answered with run.cancelled")
	accepts := fs.String("accepts", "control.attention.respond,control.cancel", "declared control.accepts, comma-separated; other commands are nacked unsupported")
	agent := fs.String("agent", "aepctl-target", "hello identity.agent and the agent of its events")
	host, _ := os.Hostname()
	instance := fs.String("instance", fmt.Sprintf("%s/%d", host, os.Getpid()), "hello identity.instance")
	window := fs.Duration("ack-window", 10*time.Second, "declared control.ack_window_ms")
	out := cli.OutputFlag(fs, "text", "text", "json")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if *session == "" {
		return cli.UsageErr(fs, "--session is required")
	}
	if err := conn.Resolve(); err != nil { // --url/--token, environment, profile, default
		return err
	}
	var list []string
	for _, a := range strings.Split(*accepts, ",") {
		if a = strings.TrimSpace(a); a != "" {
			list = append(list, a)
		}
	}
	t, err := DialTarget(ctx, TargetOptions{
		URL: conn.URL, Token: conn.Token, Session: *session, Run: *run, Agent: *agent, Instance: *instance,
		Accepts: list, AckWindow: *window, JSON: *out == "json",
	}, stdout)
	if err != nil {
		return err
	}
	return t.Serve(ctx)
}
