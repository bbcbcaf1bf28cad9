package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // a request failed or an event was rejected
	exitUsage  = 2
)

// errUsage marks a usage error (exit 2); the message was already printed.
var errUsage = errors.New("usage error")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const topUsage = `aepctl: client and load tool for aep-gateway

Usage:
  aepctl publish [flags] [FILE|-]   post NDJSON events to the gateway
  aepctl gen [flags]                print synthetic valid events as NDJSON
  aepctl bench ingest [flags]       bounded ingest load test (loopback only by default)
  aepctl target --session S [flags] a control-capable target on /socket (AEP-0004)

Run "aepctl COMMAND --help" for the flags of a command.
Environment: AEPCTL_URL (default http://127.0.0.1:8080), AEPCTL_TOKEN.
Exit codes: 0 ok, 1 request failed or event rejected, 2 usage.
`

// run is the whole CLI; it returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, topUsage)
		return exitUsage
	}
	var err error
	switch args[0] {
	case "publish":
		err = cmdPublish(ctx, args[1:], stdin, stdout, stderr)
	case "gen":
		err = cmdGen(args[1:], stdout, stderr)
	case "bench":
		err = cmdBench(ctx, args[1:], stdout, stderr)
	case "target":
		err = cmdTarget(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, topUsage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "aepctl: unknown command %q\n\n%s", args[0], topUsage)
		return exitUsage
	}
	return exitCode(err, stderr)
}

func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		return exitUsage
	case errors.Is(err, errRejected):
		return exitFailed
	default:
		fmt.Fprintf(stderr, "aepctl: %v\n", err)
		return exitFailed
	}
}
