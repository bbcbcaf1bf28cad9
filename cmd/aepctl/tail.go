package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/internal/aepclient"
	"github.com/aep-gateway/aep-gateway/internal/cli"
)

// TailOptions bound a tail and say how it prints.
type TailOptions struct {
	Output  string        // pretty (default), ndjson or json
	Count   int           // stop after this many events; 0: no limit
	Timeout time.Duration // stop after this long; 0: no limit
	Width   int           // most payload runes on a pretty line
	// Reconnect reopens a stream that was lost (not one the gateway
	// refused) from the last event seen, with backoff.
	Reconnect bool

	shared *sharedCount // TailAll's: Count over every stream
}

// sharedCount counts the events of several streams against one --count,
// and stops them all when it is reached.
type sharedCount struct {
	mu    sync.Mutex
	n     int
	max   int
	reach context.CancelFunc
}

// add counts one event; it reports whether the count is reached.
func (s *sharedCount) add() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if s.max > 0 && s.n >= s.max {
		s.reach()
		return true
	}
	return false
}

// lockedWriter serializes whole writes of several streams' printers (each
// event is one Write).
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TailAll tails several streams at once (both dialects: aepctl tail's
// default), printing their events as they come, one line each, until
// --count events over all of them, --timeout or the end of ctx. Each
// stream prints its own resume point at the end.
func TailAll(ctx context.Context, c *aepclient.Client, specs []aepclient.StreamSpec, opt TailOptions, out, errw io.Writer) (int, error) {
	if len(specs) == 1 {
		return Tail(ctx, c, specs[0], opt, out, errw)
	}
	parent := ctx
	if opt.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opt.Timeout)
		defer cancel()
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	shared := &sharedCount{max: opt.Count, reach: stop}
	one := opt
	one.Count, one.Timeout, one.shared = 0, 0, shared
	var mu sync.Mutex
	lout, lerr := lockedWriter{&mu, out}, lockedWriter{&mu, errw}
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, spec := range specs {
		wg.Go(func() {
			_, errs[i] = Tail(ctx, c, spec, one, lout, lerr)
			if errs[i] != nil {
				stop() // one stream failing ends the tail: its exit says so
			}
		})
	}
	wg.Wait()
	shared.mu.Lock()
	n := shared.n
	shared.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return n, err
	}
	if parent.Err() == nil && opt.Count > 0 && n < opt.Count && opt.Timeout > 0 {
		return n, fmt.Errorf("%w: %d of %d in %v", errIncomplete, n, opt.Count, opt.Timeout)
	}
	return n, nil
}

// errIncomplete is a tail or consume that stopped on --timeout before it
// saw --count events.
var errIncomplete = errors.New("fewer events than --count before --timeout")

// controlTypes are D stream messages about the stream, not events of it:
// they are printed but not counted.
var controlTypes = map[string]bool{"event.replayed": true, "event.redelivered": true, "event.dead_lettered": true}

// Tail opens spec and prints its events to out until opt's bounds, the end
// of ctx (a clean stop) or the end of the stream (an error; with
// opt.Reconnect, a reopen from the last event seen). Remarks and the resume
// point go to errw. It returns the number of events printed.
func Tail(ctx context.Context, c *aepclient.Client, spec aepclient.StreamSpec, opt TailOptions, out, errw io.Writer) (int, error) {
	parent := ctx
	if opt.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opt.Timeout)
		defer cancel()
	}
	tr := newResumeTracker(spec.Dialect)
	p := &printer{w: out, format: opt.Output, width: opt.Width}
	n := 0
	wait := reconnectMin
	for opened := false; ; {
		src, err := aepclient.OpenStream(ctx, c, tr.resumeSpec(spec))
		if err != nil {
			switch {
			case parent.Err() != nil:
				return n, nil
			case ctx.Err() != nil:
				printResume(errw, tr)
				return n, fmt.Errorf("tail: no stream within --timeout %v: %w", opt.Timeout, err)
			case !opt.Reconnect || !opened || refused(err):
				return n, fmt.Errorf("tail: %w", err)
			}
			fmt.Fprintf(errw, "tail: %v; retrying in %v\n", err, wait)
			if !aepclient.SleepCtx(ctx, wait) {
				printResume(errw, tr)
				return n, tailEnd(parent, ctx, ctx.Err(), opt, n)
			}
			wait = min(2*wait, reconnectMax)
			continue
		}
		opened, wait = true, reconnectMin
		fmt.Fprintf(errw, "tail: %s stream of dialect %s open on %s\n", spec.Transport, spec.Dialect, c.BaseURL)
		if ws, ok := src.(*aepclient.WSDSource); ok && tr.cursor == "" {
			tr.cursor = ws.Cursor()
		}
		err = tailStream(ctx, src, p, tr, spec.Dialect, opt.Count, &n, opt.shared, errw)
		src.Close()
		if err == nil { // --count reached
			printResume(errw, tr)
			return n, nil
		}
		if !opt.Reconnect || ctx.Err() != nil {
			printResume(errw, tr)
			return n, tailEnd(parent, ctx, err, opt, n)
		}
		fmt.Fprintf(errw, "tail: stream lost (%v); reconnecting\n", endText(err))
	}
}

// Reconnect backoff of tail --reconnect.
const (
	reconnectMin = 500 * time.Millisecond
	reconnectMax = 10 * time.Second
)

// tailStream prints src's events until count is reached (nil) or the
// stream ends (its error).
func tailStream(ctx context.Context, src aepclient.Source, p *printer, tr *resumeTracker, d aep.Dialect, count int, n *int, shared *sharedCount, errw io.Writer) error {
	for count == 0 || *n < count {
		it, err := src.Next(ctx)
		if err != nil {
			return err
		}
		if it.Note != "" {
			fmt.Fprintf(errw, "tail: %s\n", it.Note)
			continue
		}
		var v eventView
		_ = json.Unmarshal(it.Data, &v) // a non-JSON message still prints raw
		tr.observe(it, &v)
		p.print(it, &v)
		if !(d == aep.DialectD && controlTypes[v.Type]) {
			*n++
			if shared != nil && shared.add() {
				return nil
			}
		}
	}
	return nil
}

func endText(err error) string {
	if errors.Is(err, io.EOF) {
		return "the connection ended"
	}
	return err.Error()
}

// refused reports an answer that a retry would get again: a 4xx other than
// 408 and 429, or a subscription the gateway refused in-band.
func refused(err error) bool {
	var ae *aepclient.APIError
	if errors.As(err, &ae) {
		return ae.Status >= 400 && ae.Status < 500 && ae.Status != http.StatusRequestTimeout && ae.Status != http.StatusTooManyRequests
	}
	return errors.Is(err, aepclient.ErrRefused)
}

// tailEnd turns the error that ended a stream into the command's outcome.
func tailEnd(parent, ctx context.Context, err error, opt TailOptions, n int) error {
	switch {
	case parent.Err() != nil: // Ctrl-C: a clean end, whatever the stream said
		return nil //nolint:nilerr // err is the interrupted read
	case ctx.Err() != nil: // --timeout
		if opt.Count > 0 && n < opt.Count {
			return fmt.Errorf("%w: %d of %d in %v", errIncomplete, n, opt.Count, opt.Timeout)
		}
		return nil
	case errors.Is(err, io.EOF):
		return errors.New("the gateway ended the stream")
	}
	return err
}

func printResume(w io.Writer, tr *resumeTracker) {
	name, value := tr.flag()
	if name == "" {
		fmt.Fprintln(w, "tail: no resume point (no event seen)")
		return
	}
	fmt.Fprintf(w, "tail: resume with %s %s\n", name, shellQuote(value))
}

const tailSynopsis = `tail [--dialect r|d|all] [--transport sse|ws] [filters] [--from-cursor C | --from POSITIONS]
             [--output pretty|ndjson|json] [--count N] [--timeout D] [--reconnect] [--url URL] [--token KEY] [--profile P]`

const tailHelp = `Prints the gateway's events as they arrive, over SSE or WebSocket, in either
dialect (the events of the tenant of the token). Without --dialect: both
dialects' streams at once (D with --types '*'), unless a dialect's own flags
are given, which choose it.

Dialect D (GET /aep/events, or WebSocket /aep with subprotocol aep-0.1):
  filters --types, --source, --target, --topic, --session, --conversation,
  --task (comma-separated, any-of; type patterns like "task.*"); with none
  of types/source/target/topic, --types '*' is added. --mode
  best_effort|replayable.
  Resume: --from-cursor CURSOR (a replayable stream from that point).
Dialect R (GET /stream, or WebSocket /socket):
  --filter '{"session":"s1","type":"tool.*"}' (attr-match JSON),
  --capture none|metadata|redacted|full, resume: --from
  '[{"session":"s1","epoch":0,"seq":41}]' (positions) or --from all.

Output (--output): pretty, one line per event: time (UTC), type, source,
session (R: session:epoch:seq), payload cut to --width runes; ndjson, each
event as received, one per line; json, one object per line
{"event":TYPE,"id":SSE_ID,"data":EVENT}. Remarks go to stderr, and at the end
the flag that resumes after the last event seen ("tail: resume with ...").

Stops after --count events, after --timeout (exit 1 if --count was not
reached), or on Ctrl-C (exit 0). A stream that ends is exit 1, unless
--reconnect: then it is opened again from the last event seen.
`

func cmdTail(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepctl", "tail", tailSynopsis, stdout, stderr, tailHelp)
	var conn cli.ConnFlags
	conn.Register(fs)
	dialect := fs.String("dialect", "", "dialect: r, d or all (default: all, or the one whose flags are given)")
	transport := fs.String("transport", "sse", "sse or ws")
	var df dFilterFlags
	df.register(fs)
	mode := fs.String("mode", "", "D: delivery_mode best_effort or replayable (default best_effort, replayable with --from-cursor)")
	cursor := fs.String("from-cursor", "", "D: resume from this cursor (printed at the end of a tail, or an SSE id)")
	filter := fs.String("filter", "", "R: attr-match filter JSON (default {}: every event)")
	from := fs.String("from", "", "R: resume positions, a JSON array of {session,epoch,seq}, or all")
	capture := fs.String("capture", "", "R: capture ceiling: none, metadata, redacted or full")
	out := cli.OutputFlag(fs, "pretty", "pretty", "ndjson", "json")
	count := fs.Int("count", 0, "stop after N events (0: no limit)")
	timeout := fs.Duration("timeout", 0, "stop after this long (0: no limit)")
	width := fs.Int("width", 100, "most payload characters on a pretty line (0: all)")
	reconnect := fs.Bool("reconnect", false, "reopen a lost stream from the last event seen (backoff 0.5s to 10s), until --timeout, --count or Ctrl-C")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	dFlags := len(df.members()) > 0 || *mode != "" || *cursor != ""
	rFlags := *filter != "" || *from != "" || *capture != ""
	if *dialect == "" {
		switch {
		case dFlags && !rFlags:
			*dialect = "d"
		case rFlags && !dFlags:
			*dialect = "r"
		default:
			*dialect = "all"
		}
	}
	all := *dialect == "all"
	d, ok := cli.DialectFlag(*dialect)
	switch {
	case all && dFlags && rFlags:
		return cli.UsageErr(fs, "dialect D flags (--types, --mode, --from-cursor, ...) and dialect R flags (--filter, --from, --capture) together: choose one with --dialect")
	case !ok && !all:
		return cli.UsageErr(fs, "--dialect %q: want r, d or all", *dialect)
	case *transport != "sse" && *transport != "ws":
		return cli.UsageErr(fs, "--transport %q: want sse or ws", *transport)
	case *count < 0, *timeout < 0, *width < 0:
		return cli.UsageErr(fs, "--count, --timeout and --width must not be negative")
	case fs.NArg() > 0:
		return cli.UsageErr(fs, "unexpected argument %q", fs.Arg(0))
	}
	if all {
		if err := conn.Resolve(); err != nil {
			return err
		}
		c := &aepclient.Client{BaseURL: conn.URL, Token: conn.Token}
		specs := []aepclient.StreamSpec{
			{Dialect: aep.DialectR, Transport: *transport},
			{Dialect: aep.DialectD, Transport: *transport, DFilter: map[string][]string{"types": {"*"}}},
		}
		_, err := TailAll(ctx, c, specs, TailOptions{Output: *out, Count: *count, Timeout: *timeout, Width: *width, Reconnect: *reconnect}, stdout, stderr)
		return err
	}
	spec := aepclient.StreamSpec{Dialect: d, Transport: *transport}
	if d == aep.DialectD {
		if *filter != "" || *from != "" || *capture != "" {
			return cli.UsageErr(fs, "--filter, --from and --capture are dialect R flags; dialect D filters with --types, --source, ...")
		}
		spec.DFilter = df.members()
		if !df.hasAnchor() {
			spec.DFilter["types"] = []string{"*"}
		}
		switch *mode {
		case "", "best_effort", "replayable":
		default:
			return cli.UsageErr(fs, "--mode %q: want best_effort or replayable (at_least_once is \"aepctl consume\")", *mode)
		}
		spec.Mode, spec.Cursor = *mode, *cursor
	} else {
		if len(df.members()) > 0 {
			return cli.UsageErr(fs, "--types, --source, --session, ... are dialect D flags; dialect R filters with --filter JSON")
		}
		if *mode != "" || *cursor != "" {
			return cli.UsageErr(fs, "--mode and --from-cursor are dialect D flags; dialect R resumes with --from")
		}
		if *filter != "" {
			if !json.Valid([]byte(*filter)) || !strings.HasPrefix(strings.TrimSpace(*filter), "{") {
				return cli.UsageErr(fs, "--filter must be a JSON object")
			}
			spec.RFilter = json.RawMessage(*filter)
		}
		switch f := strings.TrimSpace(*from); {
		case f == "":
		case f == "all":
			spec.From = json.RawMessage(`"all"`)
		case strings.HasPrefix(f, "[") && json.Valid([]byte(f)):
			spec.From = json.RawMessage(f)
		default:
			return cli.UsageErr(fs, "--from must be a JSON array of {\"session\",\"epoch\",\"seq\"} or all")
		}
		spec.Capture = *capture
	}
	if err := conn.Resolve(); err != nil {
		return err
	}
	c := &aepclient.Client{BaseURL: conn.URL, Token: conn.Token}
	_, err := Tail(ctx, c, spec, TailOptions{Output: *out, Count: *count, Timeout: *timeout, Width: *width, Reconnect: *reconnect}, stdout, stderr)
	return err
}
