// Package tracing is the gateway's OpenTelemetry tracing: the OTLP/HTTP
// exporter (off unless an endpoint is configured) and the spans of one
// event's path: its ingest (HTTP request or WebSocket message, then one span
// per event), the Kafka write and read (franz-go's plugin/kotel, which
// carries the W3C trace context in the record's traceparent/tracestate
// headers), each delivery to a stream and each acknowledgement.
//
// Like OpenTelemetry's own global API, the tracer is process-wide: Setup
// installs it, the returned shutdown removes it, and the span helpers of
// this package read it. While tracing is off every helper returns after
// one atomic load, with no allocation, so the hot paths pay nothing.
// Setup and shutdown must not race with each other; every other function is
// safe for concurrent use.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the gateway's own spans.
const ScopeName = "github.com/aep-gateway/aep-gateway"

// Config configures Setup.
type Config struct {
	// Endpoint is the OTLP/HTTP collector's base URL, such as
	// http://collector:4318 (/v1/traces is appended when the URL has no
	// path). Empty means: the standard OTEL_EXPORTER_OTLP_ENDPOINT /
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT environment variables when set
	// (EnvEndpoint), else tracing stays off.
	Endpoint string
	// ServiceName is the service.name resource attribute. Empty means
	// "aep-gateway".
	ServiceName string
	// ServiceVersion is the service.version resource attribute.
	ServiceVersion string
	// SampleRatio is the fraction of new traces recorded, 0 to 1; a span
	// whose parent (a traceparent header or an event's own traceparent)
	// says sampled or not follows its parent.
	SampleRatio float64
	// Logger receives OpenTelemetry's own errors and diagnostics (a failed
	// export, a dropped span), as JSON lines like every other; the zero
	// Logger discards them.
	Logger zerolog.Logger
}

// EnvEndpoint reports the OTLP endpoint the standard environment
// variables name, or "".
func EnvEndpoint(getenv func(string) string) string {
	if v := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); v != "" {
		return v
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
}

// state is what Setup installs; nil while tracing is off.
type state struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	kafka  *kotel.Kotel
}

var cur atomic.Pointer[state]

// On reports whether tracing is on.
func On() bool { return cur.Load() != nil }

// traceContext is the W3C Trace Context propagator: traceparent and
// tracestate, in HTTP and Kafka record headers alike.
var traceContext = propagation.TraceContext{}

// Setup starts exporting spans to cfg's collector and turns tracing on. It
// returns shutdown, which flushes the spans still buffered, stops the
// exporter and turns tracing off (idempotent). With no endpoint configured
// tracing stays off and shutdown does nothing.
func Setup(ctx context.Context, cfg Config) (shutdown func(context.Context) error, err error) {
	if cfg.Endpoint == "" {
		return func(context.Context) error { return nil }, nil
	}
	if cfg.SampleRatio < 0 || cfg.SampleRatio > 1 {
		return nil, fmt.Errorf("tracing: sample ratio %v is not between 0 and 1", cfg.SampleRatio)
	}
	if cur.Load() != nil {
		return nil, errors.New("tracing: already set up")
	}
	// OpenTelemetry's global error handler and logger default to plain text
	// on standard error; route both into the gateway's JSON log.
	olog := cfg.Logger.With().Str("component", "otel").Logger()
	otel.SetLogger(logr.FromSlogHandler(zerolog.NewSlogHandler(olog)))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		olog.Warn().Err(err).Msg("tracing: OpenTelemetry error")
	}))
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("tracing: OTLP endpoint %q is not an http(s) URL", cfg.Endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	name := cfg.ServiceName
	if name == "" {
		name = "aep-gateway"
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", name), attribute.String("service.version", cfg.ServiceVersion)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
	)
	st := &state{
		tracer: tp.Tracer(ScopeName),
		prop:   traceContext,
		kafka: kotel.NewKotel(kotel.WithTracer(kotel.NewTracer(
			kotel.TracerProvider(tp), kotel.TracerPropagator(traceContext), kotel.ClientID("aep-gateway")))),
	}
	cur.Store(st)
	return func(ctx context.Context) error {
		if !cur.CompareAndSwap(st, nil) {
			return nil
		}
		return tp.Shutdown(ctx)
	}, nil
}

// KafkaHooks are the client options that trace a Kafka client's produced
// records (a publish span, whose context is injected into the record's
// traceparent/tracestate headers) and fetched ones (a receive span, child
// of the context in the headers, left in Record.Context): franz-go's
// plugin/kotel. Nil while tracing is off: the client then has no hook.
func KafkaHooks() []kgo.Opt {
	st := cur.Load()
	if st == nil {
		return nil
	}
	return []kgo.Opt{kgo.WithHooks(st.kafka.Hooks()...)}
}
