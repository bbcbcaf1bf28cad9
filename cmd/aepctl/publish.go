package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/internal/aepclient"
)

// errRejected is returned when some events were not accepted (exit code 1);
// the details were already printed.
var errRejected = errors.New("some events were not accepted")

// PublishOptions configure Publish. Zero values mean the defaults.
type PublishOptions struct {
	// Dialect sends every line to that dialect's endpoint. DialectUnknown
	// detects each line's dialect with aep.Detect; a line of neither dialect
	// is reported and not sent.
	Dialect aep.Dialect
	// Batch is the most events per request; zero means 500 (the gateway
	// refuses batches over 1000 by default).
	Batch int
	// MaxBodyBytes caps a request body; zero means 4 MiB (the gateway's
	// default body limit is 8 MiB). A longer line is sent alone.
	MaxBodyBytes int
	// MaxLineBytes is the longest line read; zero means 8 MiB. A longer line
	// is reported and skipped.
	MaxLineBytes int
	// Progress, when not nil, gets a line with the events read and accepted
	// and the rate, at most once per ProgressEvery (checked after each
	// batch), and a last one at the end.
	Progress io.Writer
	// ProgressEvery is the period of progress lines; zero means 1s.
	ProgressEvery time.Duration
}

func (o PublishOptions) withDefaults() PublishOptions {
	if o.Batch <= 0 {
		o.Batch = 500
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 4 << 20
	}
	if o.MaxLineBytes <= 0 {
		o.MaxLineBytes = 8 << 20
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = time.Second
	}
	return o
}

// PublishSummary counts what Publish did.
type PublishSummary struct {
	Events   int `json:"events"`   // non-blank lines read
	Accepted int `json:"accepted"` // events the gateway took
	Rejected int `json:"rejected"` // events refused (by the gateway, or locally: no dialect, too long)
	Failed   int `json:"failed"`   // events still refused for a retryable reason (5xx, 429, connection, D internal_error) after the last attempt
	Requests int `json:"requests"` // HTTP requests made, retries included
	Batches  int `json:"batches"`
}

// Publish reads NDJSON events from in and posts them in batches: a batch
// holds consecutive lines of one dialect. It prints one summary line per
// batch to out and every refused event, with its 1-based line number in in,
// to errw. Blank lines are skipped. 5xx answers and connection errors are
// retried with the same bytes (c.Retry); so are D events the gateway listed
// as retryable. The error wraps errRejected when any event was not taken.
func Publish(ctx context.Context, c *aepclient.Client, in io.Reader, opt PublishOptions, out, errw io.Writer) (PublishSummary, error) {
	p := &publisher{c: c, opt: opt.withDefaults(), out: out, errw: errw, start: time.Now()}
	p.lastAt = p.start
	r := bufio.NewReaderSize(in, 64<<10)
	for lineNo := 1; ; lineNo++ {
		line, tooLong, err := readLine(r, p.opt.MaxLineBytes)
		if len(line) > 0 || tooLong {
			p.add(ctx, lineNo, line, tooLong)
		}
		if p.refused != nil {
			break
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			p.flush(ctx)
			return p.sum, fmt.Errorf("read line %d: %w", lineNo, err)
		}
		if ctx.Err() != nil {
			return p.sum, ctx.Err()
		}
	}
	if p.refused == nil {
		p.flush(ctx)
	}
	p.progress(true)
	fmt.Fprintf(out, "total: %d events, %d accepted, %d rejected, %d failed, %d batches, %d requests\n",
		p.sum.Events, p.sum.Accepted, p.sum.Rejected, p.sum.Failed, p.sum.Batches, p.sum.Requests)
	if p.refused != nil {
		return p.sum, p.refused
	}
	if p.sum.Rejected > 0 || p.sum.Failed > 0 {
		return p.sum, errRejected
	}
	return p.sum, nil
}

// readLine returns the next line without its "\n" or "\r\n", trimmed of
// surrounding blanks; tooLong when it exceeded max (the rest is consumed).
func readLine(r *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(buf)+len(chunk) > max {
			tooLong = true
		} else {
			buf = append(buf, chunk...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if tooLong {
			buf = nil
		}
		return bytes.TrimSpace(buf), tooLong, err
	}
}

type publisher struct {
	c    *aepclient.Client
	opt  PublishOptions
	out  io.Writer
	errw io.Writer
	sum  PublishSummary

	start, lastAt time.Time // for progress lines
	lastAccepted  int

	dialect aep.Dialect
	lines   [][]byte
	nos     []int // file line number of each line
	size    int

	// refused is set when the gateway refused the credential (401, 403):
	// no event was judged, and the next batches would be refused alike,
	// so publishing stops.
	refused error
}

func (p *publisher) add(ctx context.Context, no int, line []byte, tooLong bool) {
	p.sum.Events++
	if tooLong {
		p.sum.Rejected++
		fmt.Fprintf(p.errw, "line %d: longer than %d bytes, not sent\n", no, p.opt.MaxLineBytes)
		return
	}
	d := p.opt.Dialect
	if d == aep.DialectUnknown {
		if d = aep.Detect(line); d == aep.DialectUnknown {
			p.sum.Rejected++
			fmt.Fprintf(p.errw, "line %d: not an event of either dialect (needs exactly one of \"aep\" or \"aep_version\"), not sent\n", no)
			return
		}
	}
	if len(p.lines) > 0 && (d != p.dialect || len(p.lines) >= p.opt.Batch || p.size+len(line)+1 > p.opt.MaxBodyBytes) {
		p.flush(ctx)
	}
	p.dialect = d
	p.lines = append(p.lines, line)
	p.nos = append(p.nos, no)
	p.size += len(line) + 1
}

// progress prints a progress line when one is due (or final).
func (p *publisher) progress(final bool) {
	w := p.opt.Progress
	now := time.Now()
	if w == nil || (!final && now.Sub(p.lastAt) < p.opt.ProgressEvery) {
		return
	}
	if final {
		el := now.Sub(p.start)
		fmt.Fprintf(w, "publish: done in %v: %d events read, %d accepted, %.0f events/s overall\n",
			el.Round(time.Millisecond), p.sum.Events, p.sum.Accepted, float64(p.sum.Accepted)/max(el.Seconds(), 1e-9))
		return
	}
	rate := float64(p.sum.Accepted-p.lastAccepted) / now.Sub(p.lastAt).Seconds()
	fmt.Fprintf(w, "publish: %v: %d events read, %d accepted, %.0f events/s\n",
		now.Sub(p.start).Round(time.Second), p.sum.Events, p.sum.Accepted, rate)
	p.lastAt, p.lastAccepted = now, p.sum.Accepted
}

// flush sends the pending batch and resets it.
func (p *publisher) flush(ctx context.Context) {
	if len(p.lines) == 0 {
		return
	}
	defer p.progress(false)
	p.sum.Batches++
	lines, nos := p.lines, p.nos
	p.lines, p.nos, p.size = nil, nil, 0
	pol := p.c.Retry.WithDefaults()
	waits := pol.Waits()
	for round := 1; ; round++ {
		retry := p.send(ctx, lines, nos)
		if p.refused != nil {
			return
		}
		if len(retry) == 0 || round >= pol.Attempts || ctx.Err() != nil {
			p.sum.Failed += len(retry)
			return
		}
		wait := waits.Next(0)
		fmt.Fprintf(p.errw, "retrying %d retryable events in %v\n", len(retry), wait.Round(time.Millisecond))
		if !aepclient.SleepCtx(ctx, wait) {
			p.sum.Failed += len(retry)
			return
		}
		sub, subNos := make([][]byte, len(retry)), make([]int, len(retry))
		for k, i := range retry {
			sub[k], subNos[k] = lines[i], nos[i]
		}
		lines, nos = sub, subNos
	}
}

// send posts lines once (with request-level retries) and reports the
// outcome; it returns the indexes of D events listed as retryable in a 202,
// which the caller resends. Those are not yet counted: the caller counts
// them as failed if it gives up on them.
func (p *publisher) send(ctx context.Context, lines [][]byte, nos []int) (retry []int) {
	d := p.dialect
	body := bytes.Join(lines, []byte("\n"))
	body = append(body, '\n')
	span := fmt.Sprintf("batch %d: lines %d-%d (%s, %d events)", p.sum.Batches, nos[0], nos[len(nos)-1], d, len(lines))
	res, err := p.c.SendRetry(ctx, d, body, len(lines), func(attempt int, res aepclient.Result, err error, wait time.Duration) {
		p.sum.Requests++
		fmt.Fprintf(p.errw, "%s: attempt %d: %s; retrying in %v\n", span, attempt, failureText(res, err), wait.Round(time.Millisecond))
	})
	p.sum.Requests++
	if err == nil && (res.Status == http.StatusUnauthorized || res.Status == http.StatusForbidden) {
		// The request was refused, not its events: they are neither
		// accepted nor rejected, and publishing stops.
		p.refused = &aepclient.APIError{Status: res.Status, Code: res.Code, Message: res.Detail}
		fmt.Fprintf(p.out, "%s: %s; stopped: the gateway refused the credential\n", span, failureText(res, nil))
		return nil
	}
	if err != nil || res.Retryable {
		p.sum.Accepted += res.Accepted
		p.sum.Failed += len(lines) - res.Accepted
		fmt.Fprintf(p.out, "%s: failed after %d attempts: %s; %d accepted\n", span, res.Attempts, failureText(res, err), res.Accepted)
		p.printErrors(res, nos)
		return nil
	}
	if d == aep.DialectD && res.Status == http.StatusAccepted {
		seen := make(map[int]bool)
		for _, e := range res.Errors {
			if e.Retryable && e.Index >= 0 && e.Index < len(lines) && !seen[e.Index] {
				seen[e.Index] = true
				retry = append(retry, e.Index)
			}
		}
	}
	p.sum.Accepted += res.Accepted
	p.sum.Rejected += max(res.Rejected-len(retry), 0)
	status := fmt.Sprintf("%d", res.Status)
	if res.Code != "" {
		status += " " + res.Code
	}
	fmt.Fprintf(p.out, "%s: %s, %d accepted, %d rejected", span, status, res.Accepted, res.Rejected)
	if res.Topic != "" {
		fmt.Fprintf(p.out, ", topic %s", res.Topic)
	}
	switch {
	case d == aep.DialectR && res.Rejected > 0:
		fmt.Fprint(p.out, " (an R batch is all or nothing: none written)")
	case d == aep.DialectD && res.Status == http.StatusBadRequest:
		fmt.Fprint(p.out, " (a line is not JSON: none written)")
	}
	fmt.Fprintln(p.out)
	p.printErrors(res, nos)
	return retry
}

// printErrors writes one line per refused event, by its line in the input.
func (p *publisher) printErrors(res aepclient.Result, nos []int) {
	if len(res.Errors) == 0 && res.Code != "" && res.Status != http.StatusAccepted {
		fmt.Fprintf(p.errw, "lines %d-%d: %s: %s\n", nos[0], nos[len(nos)-1], res.Code, res.Detail)
		return
	}
	for _, e := range res.Errors {
		no := "?"
		if e.Index >= 0 && e.Index < len(nos) {
			no = fmt.Sprint(nos[e.Index])
		}
		code := e.Code
		if e.Field != "" {
			code += " (" + e.Field + ")"
		}
		fmt.Fprintf(p.errw, "line %s: %s: %s\n", no, code, stripLinePrefix(e.Message))
	}
	if res.Invalid > 1 {
		fmt.Fprintf(p.errw, "lines %d-%d: %d events of this batch are invalid; the gateway names the first\n", nos[0], nos[len(nos)-1], res.Invalid)
	}
}

var linePrefix = regexp.MustCompile(`^line \d+: `)

// stripLinePrefix drops the gateway's "line N: " (a line of the request
// body, not of the input file).
func stripLinePrefix(s string) string { return linePrefix.ReplaceAllString(s, "") }

func failureText(res aepclient.Result, err error) string {
	if err != nil {
		return err.Error()
	}
	s := fmt.Sprintf("HTTP %d", res.Status)
	if res.Code != "" {
		s += " " + res.Code
	}
	if res.Detail != "" {
		s += ": " + res.Detail
	}
	return s
}
