package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aep-gateway/aep-gateway/internal/aepclient"
	"github.com/aep-gateway/aep-gateway/internal/cli"
)

const controlHelp = `Sends one AEP-0004 command to the emitter that claims --session (on any
gateway node) over /socket, and waits for its acknowledgement: the target's
control.accepted or control.rejected (cause = the command's id), or the
gateway's refusal on the target's behalf (no-route, ambiguous, unsupported,
unauthorized, invalid-event). Silence past --timeout is a timeout; with
--attempts N the same command (same id and source) is sent again, so the
target dedupes it and re-emits its recorded ack. Control needs an
authenticated gateway (--token) with control enabled (--control-policy).

COMMAND is cancel, pause, resume, respond (control.attention.respond), or a
full type: control.* or x.{vendor}.control.{verb}.

Exit codes: 0 accepted, 1 error (connection, gateway), 2 usage,
3 rejected or refused (nack), 4 timeout.

Examples:
  aepctl control cancel --session s-1 --run r-7 --reason "user asked"
  aepctl control respond --session s-1 --subject ATTN_ID --option yes
  aepctl control pause --session s-1 --timeout 3s --attempts 3 -o json
`

// commandTypes are the short names of the 0.1 commands.
var commandTypes = map[string]string{
	"cancel": "control.cancel", "pause": "control.pause", "resume": "control.resume",
	"respond": "control.attention.respond", "attention.respond": "control.attention.respond",
}

func cmdControl(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepctl", "control", "control COMMAND --session S [--run R] [flags]", stdout, stderr, controlHelp)
	var conn cli.ConnFlags
	conn.Register(fs)
	var opt ControlOptions
	fs.StringVar(&opt.Session, "session", "", "the target session (required)")
	fs.StringVar(&opt.Run, "run", "", "the target run")
	fs.StringVar(&opt.Agent, "agent", "aepctl", "the sender: the command's agent and the hello identity")
	fs.StringVar(&opt.ID, "id", "", "the command id, its idempotency key (default: a new ULID); reuse it to retry by hand")
	fs.StringVar(&opt.Cause, "cause", "", "the id of the event that prompted the command")
	fs.StringVar(&opt.Subject, "subject", "", "respond: the id of the attention.requested event")
	scope := fs.String("scope", "", "cancel: run or session (default: run with --run, else session)")
	reason := fs.String("reason", "", "cancel: the reason")
	option := fs.String("option", "", "respond: the chosen option")
	text := fs.String("text", "", "respond: a text answer")
	data := fs.String("data", "", "the command's data as a JSON object (overrides --scope/--reason/--option/--text)")
	fs.DurationVar(&opt.Window, "timeout", 10*time.Second, "the ack window of one attempt (AEP-0004 default 10s)")
	fs.IntVar(&opt.Attempts, "attempts", 1, "sends of the same command before giving up on silence")
	fs.DurationVar(&opt.Outcome, "outcome", 0, "after an accept, also wait this long for the outcome event (cause-linked); 0: don't")
	out := cli.OutputFlag(fs, "text", "text", "json")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() != 1:
		return cli.UsageErr(fs, "want one COMMAND (cancel, pause, resume, respond or a control type)")
	case opt.Session == "":
		return cli.UsageErr(fs, "--session is required")
	case opt.Window <= 0 || opt.Attempts < 1 || opt.Outcome < 0:
		return cli.UsageErr(fs, "--timeout must be positive, --attempts at least 1, --outcome not negative")
	}
	opt.Type = commandType(fs.Arg(0))
	if opt.Type == "" {
		return cli.UsageErr(fs, "COMMAND %q: want cancel, pause, resume, respond, control.* or x.{vendor}.control.{verb}", fs.Arg(0))
	}
	var err error
	if opt.Data, err = commandData(opt, *data, *scope, *reason, *option, *text); err != nil {
		return cli.UsageErr(fs, "%v", err)
	}
	if err := conn.Resolve(); err != nil {
		return err
	}
	res, err := SendControl(ctx, &aepclient.Client{BaseURL: conn.URL, Token: conn.Token}, opt)
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	if *out == "json" {
		if err := cli.WriteJSONLine(stdout, res); err != nil {
			return err
		}
	} else {
		printControl(stdout, res)
	}
	switch res.Result {
	case resultRejected, resultRefused:
		return errNacked
	case resultTimeout:
		return errTimedOut
	}
	return nil
}

// commandType maps COMMAND to a command type, "" when it is none.
func commandType(s string) string {
	if t, ok := commandTypes[s]; ok {
		return t
	}
	if strings.HasPrefix(s, "control.") || (strings.HasPrefix(s, "x.") && strings.Contains(s, ".control.")) {
		return s
	}
	return ""
}

// commandData is --data, or the payload the flags describe (AEP-0004 §5).
func commandData(opt ControlOptions, data, scope, reason, option, text string) (json.RawMessage, error) {
	if data != "" {
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil || m == nil {
			return nil, fmt.Errorf("--data: want a JSON object")
		}
		return json.RawMessage(data), nil
	}
	d := map[string]any{}
	switch opt.Type {
	case "control.cancel":
		switch {
		case scope == "" && opt.Run != "":
			scope = "run"
		case scope == "":
			scope = "session"
		case scope != "run" && scope != "session":
			return nil, fmt.Errorf("--scope %q: want run or session", scope)
		}
		d["scope"] = scope
		if reason != "" {
			d["reason"] = reason
		}
	case "control.attention.respond":
		if opt.Subject == "" || (option == "" && text == "") {
			return nil, fmt.Errorf("respond needs --subject and --option or --text")
		}
		answer := map[string]string{}
		if option != "" {
			answer["option"] = option
		}
		if text != "" {
			answer["text"] = text
		}
		d["answer"] = answer
	}
	return json.Marshal(d)
}

// printControl prints a result as one line (and the outcome's type).
func printControl(w io.Writer, r ControlResult) {
	switch r.Result {
	case resultAccepted:
		fmt.Fprintf(w, "%s %s -> session %s: accepted in %.1f ms (attempt %d)\n", r.Type, r.Command, r.Session, r.ElapsedMS, r.Attempts)
	case resultRejected:
		fmt.Fprintf(w, "%s %s -> session %s: rejected by the target (%s) %s\n", r.Type, r.Command, r.Session, r.Reason, r.Detail)
	case resultRefused:
		fmt.Fprintf(w, "%s %s -> session %s: refused by the gateway (%s) %s\n", r.Type, r.Command, r.Session, r.Reason, r.Detail)
	default:
		fmt.Fprintf(w, "%s %s -> session %s: timeout, %s\n", r.Type, r.Command, r.Session, r.Detail)
	}
	if r.Outcome != nil {
		var ev struct{ Type, ID string }
		_ = json.Unmarshal(r.Outcome, &ev)
		fmt.Fprintf(w, "  outcome: %s %s\n", ev.Type, ev.ID)
	}
}
