package main

import (
	"context"
	"fmt"
	"io"
	"os"
)

func cmdPublish(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("publish", "publish [--dialect r|d] [--url URL] [--token KEY] [--batch N] [--attempts N] [FILE|-]", stderr)
	var conn connFlags
	conn.register(fs)
	dialect := fs.String("dialect", "", "send every line as this dialect (r or d); empty: detect per line")
	batch := fs.Int("batch", 500, "most events per request (the gateway's default limit is 1000)")
	attempts := fs.Int("attempts", DefaultRetry.Attempts, "attempts per request on 5xx or connection errors (4xx is never retried)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	d, ok := dialectFlag(*dialect)
	switch {
	case !ok:
		return usageErr(fs, "--dialect %q: want r or d", *dialect)
	case *batch < 1:
		return usageErr(fs, "--batch must be at least 1")
	case *attempts < 1:
		return usageErr(fs, "--attempts must be at least 1")
	case fs.NArg() > 1:
		return usageErr(fs, "one FILE at most")
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
	c := &Client{BaseURL: conn.url, Token: conn.token, Retry: RetryPolicy{Attempts: *attempts}}
	_, err := Publish(ctx, c, in, PublishOptions{Dialect: d, Batch: *batch}, stdout, stderr)
	return err
}
