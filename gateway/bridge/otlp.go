package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// DefaultOTLPGroup is the OTLP bridges' consumer group unless configured.
const DefaultOTLPGroup = "aep-otlp-bridges"

// OTLPConfig configures an OTLPBridge.
type OTLPConfig struct {
	// Endpoint is the collector's OTLP/HTTP logs URL, e.g.
	// http://collector:4318/v1/logs. Required.
	Endpoint string
	// Headers are sent with every export (e.g. Authorization).
	Headers map[string]string
	// Client sends the exports; nil: a client with Timeout per attempt.
	Client *http.Client
	// Timeout bounds one export attempt. Zero means 10 s.
	Timeout time.Duration
	// MaxRecords and MaxBytes bound one export request. Zero means 1000
	// records and 4 MiB.
	MaxRecords, MaxBytes int
	// BackoffMin and BackoffMax bound the wait between retries (doubling,
	// with jitter; a Retry-After answer is honoured up to BackoffMax).
	// Zero means 200 ms and 10 s.
	BackoffMin, BackoffMax time.Duration

	ClientOpts     []kgo.Opt // required
	TopicRegexp    *regexp.Regexp
	Group          string // zero: DefaultOTLPGroup
	MaxCapture     aep.Capture
	Rules          Rules
	SessionTimeout time.Duration
	Logger         zerolog.Logger
	Metrics        *Metrics // required
}

// OTLPBridge exports every tenant's dialect R events as OTLP LogRecords
// (AEP-0005 §3) to a collector over OTLP/HTTP (JSON encoding), at least
// once: a poll's offsets are committed only after the collector accepted
// all of its records, and a failed export is retried, with backoff, until
// it succeeds or the process stops. Run it once.
type OTLPBridge struct {
	cfg     OTLPConfig
	tenants tenantNames
}

// NewOTLP validates cfg.
func NewOTLP(cfg OTLPConfig) (*OTLPBridge, error) {
	if cfg.Endpoint == "" || len(cfg.ClientOpts) == 0 || cfg.TopicRegexp == nil || cfg.Metrics == nil {
		return nil, errors.New("bridge: OTLPConfig.Endpoint, ClientOpts, TopicRegexp and Metrics are required")
	}
	if err := defaults(&cfg.MaxCapture, &cfg.SessionTimeout); err != nil {
		return nil, err
	}
	if cfg.Group == "" {
		cfg.Group = DefaultOTLPGroup
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: cfg.Timeout}
	}
	if cfg.MaxRecords <= 0 {
		cfg.MaxRecords = 1000
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 4 << 20
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = 200 * time.Millisecond
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(10*time.Second, cfg.BackoffMin)
	}
	return &OTLPBridge{cfg: cfg, tenants: tenantNames{re: cfg.TopicRegexp}}, nil
}

func (b *OTLPBridge) tenantOf(topic string) string { return b.tenants.of(topic) }

// Run exports until ctx ends (nil; the offsets of a batch not yet accepted
// stay uncommitted, and the next owner exports it again) or the client
// cannot be made.
func (b *OTLPBridge) Run(ctx context.Context) error {
	m := b.cfg.Metrics
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), b.cfg.ClientOpts...),
		kgo.ConsumerGroup(b.cfg.Group), kgo.ConsumeRegex(), kgo.ConsumeTopics(b.cfg.TopicRegexp.String()),
		kgo.DisableAutoCommit(), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.SessionTimeout(b.cfg.SessionTimeout),
		kgo.FetchMaxBytes(4<<20), kgo.FetchMaxPartitionBytes(1<<20),
		kgo.FetchMinBytes(fetchMinBytes), kgo.FetchMaxWait(fetchMaxWait),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) { m.forget(NameOTLP, b.tenantOf, lost) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) { m.forget(NameOTLP, b.tenantOf, lost) }),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMaxAge(10*time.Second))...)
	if err != nil {
		return fmt.Errorf("bridge otlp: client: %w", err)
	}
	defer cl.Close()
	b.cfg.Logger.Info().Str("bridge", NameOTLP).Str("group", b.cfg.Group).Str("endpoint", b.cfg.Endpoint).
		Str("max_capture", b.cfg.MaxCapture.String()).Msg("bridge started")
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return nil
		}
		fs.EachError(func(topic string, p int32, err error) {
			b.cfg.Logger.Warn().Err(err).Str("bridge", NameOTLP).Str("topic", topic).Int32("partition", p).Msg("bridge: fetch")
		})
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if n := len(p.Records); n > 0 {
				m.setLag(NameOTLP, b.tenantOf, p.Topic, p.Partition, p.HighWatermark-p.Records[n-1].Offset-1)
			}
		})
		recs := fs.Records()
		if len(recs) == 0 {
			continue
		}
		start := time.Now()
		if !b.exportAll(ctx, recs) {
			return nil // stopped mid-export: uncommitted, exported again by the next owner
		}
		m.exports.WithLabelValues(NameOTLP).Observe(time.Since(start).Seconds())
		if err := cl.CommitRecords(ctx, recs...); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			m.duplicates.WithLabelValues(NameOTLP).Add(float64(len(recs)))
			b.cfg.Logger.Warn().Err(err).Int("records", len(recs)).Msg("bridge otlp: commit failed (the records may be exported again)")
		}
	}
}

// exportAll projects recs and exports them in requests within the bounds;
// false when ctx ended before every request was accepted.
func (b *OTLPBridge) exportAll(ctx context.Context, recs []*kgo.Record) bool {
	var items []exportItem
	var tenants []string
	size := 0
	flush := func() bool {
		if len(items) == 0 {
			return true
		}
		ok := b.export(ctx, items, tenants)
		items, tenants, size = items[:0], tenants[:0], 0
		return ok
	}
	for _, r := range recs {
		it, tenant, ok := b.project(r)
		if !ok {
			continue
		}
		if len(items) > 0 && (len(items) >= b.cfg.MaxRecords || size+len(it.record)+len(it.resource) > b.cfg.MaxBytes) {
			if !flush() {
				return false
			}
		}
		items = append(items, it)
		tenants = append(tenants, tenant)
		size += len(it.record) + len(it.resource)
	}
	return flush()
}

// project is r's LogRecord, or false for a record not exported (counted).
func (b *OTLPBridge) project(r *kgo.Record) (exportItem, string, bool) {
	m := b.cfg.Metrics
	tenant := b.tenantOf(r.Topic)
	if tenant == "" {
		return exportItem{}, "", false
	}
	var attrs aep.Attrs
	if err := partitioning.DecodeHeaders(r.Headers, &attrs); err != nil {
		m.count(NameOTLP, tenant, outcomeInvalid, 1)
		return exportItem{}, tenant, false
	}
	ceiling, outcome := b.cfg.Rules.decide(NameOTLP, tenant, &attrs, b.cfg.MaxCapture)
	if outcome != "" {
		m.count(NameOTLP, tenant, outcome, 1)
		return exportItem{}, tenant, false
	}
	lr, err := aep.ToOTLPLog(r.Value, ceiling)
	var rec, res []byte
	if err == nil {
		rec, err = appendLogRecord(nil, lr)
	}
	if err == nil {
		tb, _ := json.Marshal(tenant)
		lr.Resource["aep.tenant"] = tb
		res, err = appendAttributes(nil, lr.Resource)
	}
	if err != nil {
		m.count(NameOTLP, tenant, outcomeInvalid, 1)
		b.cfg.Logger.Warn().Err(err).Str("topic", r.Topic).Int32("partition", r.Partition).Int64("offset", r.Offset).Msg("bridge otlp: the record does not map (skipped)")
		return exportItem{}, tenant, false
	}
	return exportItem{resource: string(res), record: rec}, tenant, true
}

// exportError is an attempt's failure: retry says whether sending again
// can succeed, reason labels the retry, after is the receiver's
// Retry-After.
type exportError struct {
	err    error
	retry  bool
	reason string
	after  time.Duration
}

func (e *exportError) Error() string { return e.err.Error() }

// export sends one request until the receiver accepts it or refuses it for
// good; false when ctx ended first.
func (b *OTLPBridge) export(ctx context.Context, items []exportItem, tenants []string) bool {
	m := b.cfg.Metrics
	body := logsRequest(items)
	wait := b.cfg.BackoffMin
	unknown := false // an earlier attempt may have been accepted
	for {
		rejected, err := b.post(ctx, body)
		if err == nil {
			if unknown {
				m.duplicates.WithLabelValues(NameOTLP).Add(float64(len(items)))
			}
			b.countTenants(tenants, rejected)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		var ee *exportError
		if !errors.As(err, &ee) || !ee.retry {
			b.cfg.Logger.Error().Err(err).Int("records", len(items)).Msg("bridge otlp: the receiver refused the export for good (counted as rejected, not retried)")
			b.countTenants(tenants, len(items))
			return true
		}
		m.retries.WithLabelValues(NameOTLP, ee.reason).Inc()
		unknown = unknown || ee.reason == "timeout"
		d := wait/2 + rand.N(wait/2+1) // jitter: the bridges of a group do not retry in step
		if ee.after > 0 {
			d = min(ee.after, b.cfg.BackoffMax)
		}
		b.cfg.Logger.Warn().Err(err).Dur("retry_in", d).Int("records", len(items)).Msg("bridge otlp: export failed, retrying")
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
		}
		wait = min(wait*2, b.cfg.BackoffMax)
	}
}

// countTenants counts an accepted request: its records written, the last
// rejected of them (a partial success) rejected. The receiver does not say
// which were rejected; they are counted against the request's tenants in order.
func (b *OTLPBridge) countTenants(tenants []string, rejected int) {
	for i, t := range tenants {
		outcome := outcomeWritten
		if i >= len(tenants)-rejected {
			outcome = outcomeRejected
		}
		b.cfg.Metrics.count(NameOTLP, t, outcome, 1)
	}
}

// maxAnswer bounds the receiver's answer read.
const maxAnswer = 64 << 10

// post is one attempt: the count of records the receiver rejected in an
// accepted request (partial success), or an *exportError.
func (b *OTLPBridge) post(ctx context.Context, body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.cfg.Endpoint, bytes.NewReader(body))
	if err != nil {
		return 0, &exportError{err: fmt.Errorf("otlp: request: %w", err)}
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range b.cfg.Headers {
		req.Header.Set(k, v)
	}
	resp, err := b.cfg.Client.Do(req)
	if err != nil {
		reason := "unreachable"
		var ne interface{ Timeout() bool }
		if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
			reason = "timeout"
		}
		return 0, &exportError{err: fmt.Errorf("otlp: %w", err), retry: true, reason: reason}
	}
	defer func() { _ = resp.Body.Close() }()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	switch {
	case resp.StatusCode/100 == 2:
		var ps struct {
			PartialSuccess struct {
				RejectedLogRecords json.Number `json:"rejectedLogRecords"`
				ErrorMessage       string      `json:"errorMessage"`
			} `json:"partialSuccess"`
		}
		if json.Unmarshal(answer, &ps) == nil {
			if n, _ := ps.PartialSuccess.RejectedLogRecords.Int64(); n > 0 {
				b.cfg.Logger.Warn().Int64("rejected", n).Str("message", ps.PartialSuccess.ErrorMessage).Msg("bridge otlp: partial success")
				return int(n), nil
			}
		}
		return 0, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusBadGateway ||
		resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout:
		// OTLP/HTTP: these are the retryable answers
		var after time.Duration
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			after = time.Duration(s) * time.Second
		}
		return 0, &exportError{err: fmt.Errorf("otlp: %s: %.200s", resp.Status, answer), retry: true, reason: "status", after: after}
	default:
		return 0, &exportError{err: fmt.Errorf("otlp: %s: %.200s", resp.Status, answer)}
	}
}
