package main

import (
	"bufio"
	"context"
	"io"
	"time"

	"github.com/aep-gateway/aep-gateway/internal/cli"
	"github.com/aep-gateway/aep-gateway/internal/eventgen"
)

func cmdGen(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepctl", "gen", "gen [--dialect r|d] [--sessions S] [--events N] [--size BYTES] [--seed N] [--output ndjson|json]", stdout, stderr,
		"Prints valid synthetic events, round robin over --sessions sessions: NDJSON\n(one event a line, what publish reads) or, with --output json, one JSON array.\n")
	dialect := fs.String("dialect", "r", "dialect of the events: r or d")
	sessions := fs.Int("sessions", 10, "sessions the events are spread over, round robin")
	events := fs.Int("events", 100, "number of events to print")
	size := fs.Int("size", 0, "pad each event to about this many bytes (0: no padding)")
	seed := fs.Uint64("seed", 0, "ULID entropy seed (0: random); the same seed within the same millisecond repeats ids")
	out := cli.OutputFlag(fs, "ndjson", "ndjson", "json", "text")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	d, ok := cli.DialectFlag(*dialect)
	switch {
	case !ok || *dialect == "":
		return cli.UsageErr(fs, "--dialect %q: want r or d", *dialect)
	case *sessions < 1:
		return cli.UsageErr(fs, "--sessions must be at least 1")
	case *events < 0:
		return cli.UsageErr(fs, "--events must not be negative")
	case *size < 0 || *size > 1<<20:
		return cli.UsageErr(fs, "--size must be within 0..1048576")
	case fs.NArg() > 0:
		return cli.UsageErr(fs, "unexpected argument %q", fs.Arg(0))
	}
	g := eventgen.NewGenerator(eventgen.GenOptions{Dialect: d, Sessions: *sessions, Size: *size, Seed: *seed, Start: time.Now()})
	if *out != "json" {
		return eventgen.WriteEvents(context.Background(), stdout, g, *events)
	}
	// A JSON array: the same events, comma-separated.
	bw := bufio.NewWriterSize(stdout, 64<<10)
	buf := []byte{'['}
	for i := range *events {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf, _ = g.Next(buf)
		_, _ = bw.Write(buf) // bufio keeps the first error: Flush returns it
		buf = buf[:0]
	}
	_, _ = bw.WriteString("]\n")
	return bw.Flush()
}
