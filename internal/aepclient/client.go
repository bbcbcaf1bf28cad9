package aepclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/aep-gateway/aep-gateway/aep"
)

// Client posts event bodies to one gateway. Safe for concurrent use.
type Client struct {
	// BaseURL is the gateway's base URL, e.g. "http://127.0.0.1:8080".
	BaseURL string
	// Token, when not empty, is sent as "Authorization: Bearer <Token>".
	Token string
	// HTTP is the client used. Nil means http.DefaultClient.
	HTTP *http.Client
	// Retry governs SendRetry. The zero value means DefaultRetry.
	Retry RetryPolicy
}

// RetryPolicy is exponential backoff with jitter for 5xx answers and
// connection errors. 4xx answers are never retried.
type RetryPolicy struct {
	Attempts int           // total attempts including the first; zero means 5
	Base     time.Duration // first backoff; zero means 200ms
	Max      time.Duration // backoff cap, also caps Retry-After; zero means 5s
}

// DefaultRetry is the policy of a zero RetryPolicy.
var DefaultRetry = RetryPolicy{Attempts: 5, Base: 200 * time.Millisecond, Max: 5 * time.Second}

// WithDefaults fills the zero fields of p from DefaultRetry.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.Attempts <= 0 {
		p.Attempts = DefaultRetry.Attempts
	}
	if p.Base <= 0 {
		p.Base = DefaultRetry.Base
	}
	if p.Max <= 0 {
		p.Max = DefaultRetry.Max
	}
	return p
}

// RetryWaits are the waits of one request's retries: github.com/cenkalti/
// backoff's exponential backoff, Base·2^(n-1) before attempt n+1, capped at
// Max, with ±20% jitter.
type RetryWaits struct {
	b   *backoff.ExponentialBackOff
	max time.Duration
}

// Waits starts the waits of one request's retries under p.
func (p RetryPolicy) Waits() RetryWaits {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.Multiplier, b.RandomizationFactor = p.Base, p.Max, 2, 0.2
	b.Reset()
	return RetryWaits{b: b, max: p.Max}
}

// Next is the wait before the next attempt; a Retry-After from the server
// wins when it is longer, capped at Max too.
func (w RetryWaits) Next(retryAfter time.Duration) time.Duration {
	d := w.b.NextBackOff()
	if retryAfter > d {
		d = min(retryAfter, w.max)
	}
	return d
}

// Endpoint returns the ingest path of dialect d.
func Endpoint(d aep.Dialect) string {
	if d == aep.DialectD {
		return "/aep/events"
	}
	return "/events"
}

// EventError is one event the gateway did not take.
type EventError struct {
	Index     int    // 0-based index of the event in the request body
	Code      string // the dialect's error code
	Field     string // the attribute at fault, when the gateway named one
	Message   string
	Retryable bool // D: the error object's retryable; R: a 5xx "failed" entry
}

// Result is the gateway's answer to one request, decoded from either
// dialect's response shape.
type Result struct {
	Status   int
	Accepted int
	// Rejected counts the events not written: for R every event of a refused
	// request (a batch is all or nothing), for D the events listed in errors.
	Rejected int
	Topic    string
	// Code and Detail describe a whole-request refusal (4xx/5xx with an error
	// body), empty otherwise.
	Code, Detail string
	// Invalid is R's count of invalid events when more than one failed.
	Invalid int
	Errors  []EventError
	// Retryable reports a whole-request refusal that may succeed later: a
	// 5xx, or a 429 whose error the server did not mark retryable:false (D
	// does when a batch exceeds the tenant's burst; R bodies carry no flag).
	Retryable bool
	// Attempts is how many requests SendRetry made (1 for Send).
	Attempts int
	// RetryAfter is the server's Retry-After, when it sent one.
	RetryAfter time.Duration
}

// OK reports whether every event was taken.
func (r Result) OK() bool { return r.Status == http.StatusAccepted && r.Rejected == 0 }

// Send posts one body (NDJSON, one event per line) of n events of dialect d
// and decodes the answer. The error is non-nil only when no HTTP answer was
// read (connection error, cancelled context); a refusal is a Result.
func (c *Client) Send(ctx context.Context, d aep.Dialect, body []byte, n int) (Result, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.BaseURL, "/")+Endpoint(d), bytes.NewReader(body))
	if err != nil {
		return Result{}, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	if d == aep.DialectR {
		req.Header.Set(aep.HeaderAEPVersion, aep.SupportedVersions(aep.DialectR)[0])
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Result{}, fmt.Errorf("post %s: %w", Endpoint(d), err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return Result{}, fmt.Errorf("read response: %w", err)
	}
	res := DecodeResult(resp.StatusCode, raw, n)
	res.Attempts = 1
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		res.RetryAfter = time.Duration(s) * time.Second
	}
	return res, nil
}

// SendRetry is Send, repeated with the same bytes while the answer is a 5xx,
// a retryable 429 (rate limited; Retry-After is honoured up to
// c.Retry.Max) or the connection failed, up to c.Retry.Attempts. Other 4xx
// answers are never retried. Resending is safe
// because the events carry their ids: the gateway answers a retry of an event
// it wrote within its idempotency window with the first write's position
// (docs/operations.md §7), and consumers dedupe on the id. onRetry, when not nil, is told about each retry.
func (c *Client) SendRetry(ctx context.Context, d aep.Dialect, body []byte, n int, onRetry func(attempt int, res Result, err error, wait time.Duration)) (Result, error) {
	p := c.Retry.WithDefaults()
	waits := p.Waits()
	for attempt := 1; ; attempt++ {
		res, err := c.Send(ctx, d, body, n)
		res.Attempts = attempt
		if !retryable(res, err) || attempt >= p.Attempts || ctx.Err() != nil {
			return res, err
		}
		wait := waits.Next(res.RetryAfter)
		if onRetry != nil {
			onRetry(attempt, res, err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

func retryable(res Result, err error) bool {
	if err != nil {
		return true
	}
	return res.Retryable
}

// WireResult is the union of both dialects' response bodies.
type WireResult struct {
	Accepted *int            `json:"accepted"`
	Rejected *int            `json:"rejected"`
	Topic    string          `json:"topic"`
	Error    json.RawMessage `json:"error"` // R: a code string; D: an error object
	Detail   string          `json:"detail"`
	Field    string          `json:"field"`
	Index    *int            `json:"index"`
	Invalid  int             `json:"invalid"`
	Versions []string        `json:"versions"`
	Errors   []struct {
		EventIndex int     `json:"event_index"`
		Error      wireErr `json:"error"`
	} `json:"errors"`
	Failed []struct {
		Index int `json:"index"`
	} `json:"failed"`
}

type wireErr struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	Details   struct {
		Field string `json:"field"`
	} `json:"details"`
}

// DecodeResult reads a response of either dialect; n is the number of events
// sent, used when the body does not say how many were refused. Accepted and
// Rejected are clamped to [0, n] whatever the server claims.
func DecodeResult(status int, raw []byte, n int) Result {
	res := decodeBody(status, raw, n)
	res.Retryable = status >= 500 || (status == http.StatusTooManyRequests && res.Retryable)
	n = max(n, 0)
	res.Accepted = min(max(res.Accepted, 0), n)
	res.Rejected = min(max(res.Rejected, 0), n-res.Accepted)
	return res
}

func decodeBody(status int, raw []byte, n int) Result {
	if status == http.StatusAccepted {
		if res, ok := DecodeAccepted(raw); ok {
			return res
		}
	}
	res := Result{Status: status}
	var w WireResult
	if err := json.Unmarshal(raw, &w); err != nil {
		res.Code = "bad-response"
		res.Detail = fmt.Sprintf("HTTP %d, body not JSON: %.200q", status, raw)
		res.Rejected = n
		return res
	}
	res.Topic = w.Topic
	res.Invalid = w.Invalid
	if w.Accepted != nil {
		res.Accepted = *w.Accepted
	}
	for _, e := range w.Errors { // D summary
		res.Errors = append(res.Errors, EventError{Index: e.EventIndex, Code: e.Error.Code, Field: e.Error.Details.Field,
			Message: e.Error.Message, Retryable: e.Error.Retryable})
	}
	switch {
	case w.Rejected != nil: // D summary shape (202, 400 non-JSON lines, 503)
		res.Rejected = *w.Rejected
	case len(w.Error) > 0 && w.Error[0] == '{': // D whole-request refusal
		var e wireErr
		_ = json.Unmarshal(w.Error, &e)
		res.Code, res.Detail = e.Code, e.Message
		res.Rejected = n
		res.Retryable = e.Retryable
	case len(w.Error) > 0: // R error body
		_ = json.Unmarshal(w.Error, &res.Code)
		res.Detail = w.Detail
		res.Retryable = true // R has no flag: only the status decides
		res.Rejected = n - res.Accepted
		if w.Index != nil {
			res.Errors = append(res.Errors, EventError{Index: *w.Index, Code: res.Code, Field: w.Field, Message: w.Detail})
		}
		for _, f := range w.Failed {
			res.Errors = append(res.Errors, EventError{Index: f.Index, Code: res.Code, Message: w.Detail, Retryable: true})
		}
	case w.Versions != nil: // R 426
		res.Code = "version"
		res.Detail = "the gateway supports AEP versions " + strings.Join(w.Versions, ", ")
		res.Rejected = n
	case status != http.StatusAccepted:
		res.Code = "http-" + strconv.Itoa(status)
		res.Detail = fmt.Sprintf("%.200s", raw)
		res.Rejected = n
	}
	return res
}

// DecodeAccepted reads the common 202 body without encoding/json, whose
// scan of every position cost a bench client as much CPU as a good part of
// the gateway's work: R's {"accepted":N,"topic":"T","positions":[...]} and
// D's {"accepted":N,"rejected":0,"errors":[],"topic":"T","positions":[...]}
// (members in the order the gateway writes them, a topic without escapes).
// Anything else reports false and goes through encoding/json; so does a
// body that is not closed as the gateway closes it.
func DecodeAccepted(raw []byte) (Result, bool) {
	b := bytes.TrimRight(raw, "\r\n")
	if !bytes.HasSuffix(b, []byte("]}")) {
		return Result{}, false
	}
	b, ok := bytes.CutPrefix(b, []byte(`{"accepted":`))
	if !ok {
		return Result{}, false
	}
	i := 0
	for i < len(b) && i < 10 && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	accepted, err := strconv.Atoi(string(b[:i]))
	if err != nil {
		return Result{}, false
	}
	b = b[i:]
	b, _ = bytes.CutPrefix(b, []byte(`,"rejected":0,"errors":[]`))
	res := Result{Status: http.StatusAccepted, Accepted: accepted}
	if rest, ok := bytes.CutPrefix(b, []byte(`,"topic":"`)); ok {
		end := bytes.IndexByte(rest, '"')
		if end < 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
			return Result{}, false
		}
		res.Topic, b = string(rest[:end]), rest[end+1:]
	}
	if !bytes.HasPrefix(b, []byte(`,"positions":[`)) {
		return Result{}, false
	}
	return res, true
}

// SleepCtx waits d or until ctx is done; it reports whether d elapsed.
func SleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
