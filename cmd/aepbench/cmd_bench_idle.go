package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/aep-gateway/aep-gateway/internal/cli"
)

const benchIdleSynopsis = "idle (--gateway-bin PATH | --url URL --gateway-pid PID) [--kafka-brokers B] [--centrifugo-bin PATH | --centrifugo-url URL ... | --no-centrifugo] [--connections N] [--transports sse,ws] [--settle D] [--storm D] [--output text|json]"

const benchIdleHelp = `Idle connections: opens N live subscribers that receive nothing, reads the
server process's RSS (VmRSS of /proc/<pid>/status) before and after, and
reports RSS per connection; then closes every connection at once and samples
RSS every 10ms for --storm (the disconnect storm's peak). With started servers
each transport gets fresh processes (the Go runtime keeps freed memory, so a
second measurement in the same process would read low); the gateway runs
before Centrifugo. The open-file limit is raised to the hard limit; both
processes need one descriptor per connection.
`

func cmdBenchIdle(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepbench", "idle", benchIdleSynopsis, stdout, stderr, benchIdleHelp)
	var sf serverFlags
	sf.register(fs, true)
	conns := fs.Int("connections", 10000, "idle connections per run, 1..100000")
	transports := fs.String("transports", "sse,ws", "comma-separated transports: sse, ws")
	settle := fs.Duration("settle", 3*time.Second, "wait before each RSS reading")
	storm := fs.Duration("storm", 3*time.Second, "RSS sampling after the mass close")
	dial := fs.Int("dial-concurrency", 64, "connections opened at once")
	out := cli.OutputFlag(fs, "text", "text", "json")
	progress := fs.Bool("progress", cli.IsTerminal(stderr), "print progress to stderr (default: when stderr is a terminal)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	trs, err := parseTransports(*transports)
	switch {
	case err != nil:
		return cli.UsageErr(fs, "--transports: %v", err)
	case *conns < 1 || *conns > 100000 || *dial < 1 || *settle < 0 || *storm < 0:
		return cli.UsageErr(fs, "--connections must be 1..100000, --dial-concurrency at least 1, durations not negative")
	case fs.NArg() > 0:
		return cli.UsageErr(fs, "unexpected argument %q", fs.Arg(0))
	}
	if err := sf.validate(); err != nil {
		return cli.UsageErr(fs, "%v", err)
	}
	say := progressFunc(stderr, *progress)
	limit, err := raiseNoFile()
	if err != nil {
		return fmt.Errorf("open-file limit: %w", err)
	}
	if limit < uint64(*conns)+256 {
		return fmt.Errorf("the open-file limit is %d, too low for %d connections (raise the hard limit: ulimit -Hn)", limit, *conns)
	}
	rep := IdleReport{}
	for _, tr := range trs {
		runs, err := idleTransport(ctx, &sf, IdleConfig{Transport: tr, Connections: *conns, Settle: *settle, Storm: *storm, Dial: *dial, Progress: say})
		if err != nil {
			return err
		}
		rep.Runs = append(rep.Runs, runs...)
	}
	rep.LoadAvg = loadAvg()
	rep.ratios()
	if *out == "json" {
		return cli.WriteJSONLine(stdout, rep)
	}
	printIdle(stdout, rep)
	return nil
}

// idleTransport measures every peer over one transport, on servers started
// for it.
func idleTransport(ctx context.Context, sf *serverFlags, cfg IdleConfig) ([]IdleResult, error) {
	srv, err := sf.start(ctx, cfg.Progress)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	var out []IdleResult
	for _, np := range srv.peers() {
		r, err := runIdle(ctx, np.name, np.p, cfg)
		if err != nil {
			return nil, fmt.Errorf("idle %s %s: %w", np.name, cfg.Transport, err)
		}
		out = append(out, r)
	}
	return out, nil
}
