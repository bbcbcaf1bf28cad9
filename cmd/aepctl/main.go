package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/aep-gateway/aep-gateway/internal/cli"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailed  = 1 // a request failed or an event was rejected
	exitUsage   = 2
	exitNack    = 3 // control: the command was rejected or refused
	exitTimeout = 4 // control: no acknowledgement within the window
	// exitAudit (5, cmd_audit_log.go): audit verify or check-proof found
	// the log, its checkpoints or the proof altered.
)

func main() { cli.Main(run) }

const topUsage = `aepctl: the command-line client of aep-gateway

Usage:
  aepctl tail [flags]                       print live events (SSE or WebSocket, dialect R or D)
  aepctl publish [flags] [FILE|-]           post NDJSON events to the gateway
  aepctl subscriptions create|list|get|delete
                                            durable dialect D subscriptions, with their lag
  aepctl consume --subscription ID [--ack]  read a durable subscription, acknowledging what was printed
  aepctl ack|reject --subscription ID EVENT_ID...
                                            acknowledge or reject events of a durable subscription
  aepctl dead-letters [--limit N]           the newest dead letters of the tenant
  aepctl audit EVENT_ID [--partition N]     an event's audit record: who published it, its deliveries
  aepctl audit verify|export|prove|check-proof
                                            the log against its signed checkpoints (docs/audit.md)
  aepctl export --tenant T --brokers B      a tenant's CloudEvents, OCSF or events topic as JSON Lines
  aepctl gen [flags]                        print synthetic valid events as NDJSON
  aepctl version                            print the version (also --version)
  aepctl help config                        the config file and its profiles
  aepctl target --session S [flags]         a control-capable target on /socket (AEP-0004)
  aepctl control COMMAND --session S        send an AEP-0004 command, wait for its ack

Run "aepctl COMMAND --help" for the flags of a command.
Gateway and key: --url/--token, else $AEPCTL_URL/$AEPCTL_TOKEN, else the profile
(--profile, $AEPCTL_PROFILE) of the config file, else http://127.0.0.1:8080.
Every command takes --output (-o): text|json, tail and consume pretty|ndjson|json.
Exit codes: 0 ok, 1 request failed or event rejected, 2 usage;
control: 3 rejected or refused, 4 no ack within the window.
`

// benchMoved answers "aepctl bench": the benchmark harness is its own
// command, so the client users install carries no load generator.
const benchMoved = `aepctl: the benchmarks moved to their own command, aepbench:
  aepbench ingest|fanout|latency|idle|cleanup [flags]
(go build ./cmd/aepbench, or make bench-report; docs/benchmarks.md)
`

// run is the whole CLI; it returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, topUsage)
		return exitUsage
	}
	var err error
	switch args[0] {
	case "tail":
		err = cmdTail(ctx, args[1:], stdout, stderr)
	case "publish":
		err = cmdPublish(ctx, args[1:], stdin, stdout, stderr)
	case "subscriptions", "subscription", "subs":
		err = cmdSubscriptions(ctx, args[1:], stdout, stderr)
	case "consume":
		err = cmdConsume(ctx, args[1:], stdout, stderr)
	case "ack", "reject":
		err = cmdAck(ctx, args[0], args[1:], stdout, stderr)
	case "dead-letters", "deadletters", "dlq":
		err = cmdDeadLetters(ctx, args[1:], stdout, stderr)
	case "audit":
		if len(args) > 1 && auditSubcommands[args[1]] != nil {
			err = auditSubcommands[args[1]](ctx, args[2:], stdout, stderr)
		} else {
			err = cmdAudit(ctx, args[1:], stdout, stderr)
		}
	case "export":
		err = cmdExport(ctx, args[1:], stdout, stderr)
	case "gen":
		err = cmdGen(args[1:], stdout, stderr)
	case "bench":
		fmt.Fprint(stderr, benchMoved)
		return exitUsage
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, versionString())
		return exitOK
	case "target":
		err = cmdTarget(ctx, args[1:], stdout, stderr)
	case "control":
		err = cmdControl(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[1] == "config" {
			fmt.Fprint(stdout, cli.ConfigHelp)
			return exitOK
		}
		if len(args) > 1 {
			return run(ctx, []string{args[1], "--help"}, stdin, stdout, stderr)
		}
		fmt.Fprint(stdout, topUsage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "aepctl: unknown command %q\n\n%s", args[0], topUsage)
		return exitUsage
	}
	return exitCode(err, stderr, cli.JSONOutput(args[1:]))
}

// exitCode maps err to the exit code and writes the errors no other output
// reported: "aepctl: ..." on stderr, or with jsonOut one JSON object,
// {"error":{"message", "status", "code"}} (status and code when the
// gateway answered with an error).
func exitCode(err error, stderr io.Writer, jsonOut bool) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, cli.ErrUsage):
		return exitUsage
	case errors.Is(err, errAudit):
		return exitAudit
	case errors.Is(err, errRejected):
		return exitFailed
	case errors.Is(err, errNacked):
		return exitNack
	case errors.Is(err, errTimedOut):
		return exitTimeout
	}
	cli.WriteError(stderr, "aepctl", err, jsonOut)
	return exitFailed
}
