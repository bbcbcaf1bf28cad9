package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/aep-gateway/aep-gateway/internal/aepclient"
	"github.com/aep-gateway/aep-gateway/internal/cli"
)

func cmdPublish(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepctl", "publish", "publish [--dialect r|d] [--url URL] [--token KEY] [--batch N] [--attempts N] [--output text|json] [--progress] [FILE|-]", stdout, stderr,
		"Posts NDJSON events (one a line) from FILE or stdin in batches, with retries on\n5xx, 429 and connection errors. Text output: one line per batch and a total;\nrefused events on stderr by input line number. --output json: one JSON object\n{events, accepted, rejected, failed, requests, batches} at the end.\n")
	var conn cli.ConnFlags
	conn.Register(fs)
	dialect := fs.String("dialect", "", "send every line as this dialect (r or d); empty: detect per line")
	batch := fs.Int("batch", 500, "most events per request (the gateway's default limit is 1000)")
	attempts := fs.Int("attempts", aepclient.DefaultRetry.Attempts, "attempts per request on 5xx or connection errors (4xx is never retried)")
	out := cli.OutputFlag(fs, "text", "text", "json")
	progress := fs.Bool("progress", cli.IsTerminal(stderr), "print events read, accepted and events/s every second to stderr (default: when stderr is a terminal)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	d, ok := cli.DialectFlag(*dialect)
	switch {
	case !ok:
		return cli.UsageErr(fs, "--dialect %q: want r or d", *dialect)
	case *batch < 1:
		return cli.UsageErr(fs, "--batch must be at least 1")
	case *attempts < 1:
		return cli.UsageErr(fs, "--attempts must be at least 1")
	case fs.NArg() > 1:
		return cli.UsageErr(fs, "one FILE at most")
	}
	if err := conn.Resolve(); err != nil {
		return err
	}
	in := stdin
	if name := fs.Arg(0); name != "" && name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		defer f.Close()
		in = f
	}
	c := &aepclient.Client{BaseURL: conn.URL, Token: conn.Token, Retry: aepclient.RetryPolicy{Attempts: *attempts}}
	opt := PublishOptions{Dialect: d, Batch: *batch}
	if *progress {
		opt.Progress = stderr
	}
	w := stdout
	if *out == "json" {
		w = io.Discard
	}
	sum, err := Publish(ctx, c, in, opt, w, stderr)
	if *out == "json" && (err == nil || errors.Is(err, errRejected)) {
		if jerr := cli.WriteJSONLine(stdout, sum); jerr != nil {
			return jerr
		}
	}
	return err
}
