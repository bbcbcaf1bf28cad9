package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// HTTPHandler gives each request to h on route (the path template,
// "/events") its server span through OpenTelemetry's otelhttp: named
// "METHOD route", the child of the request's valid traceparent header,
// with OpenTelemetry's HTTP server attributes, http.route the template,
// and status Error on a 5xx answer. The handler reads the tracer Setup
// installed at each request, so it may be built before Setup; call it
// only while On (the caller's off path skips it: otelhttp allocates
// even with a no-op tracer).
func HTTPHandler(h http.Handler, route string) http.Handler {
	return otelhttp.NewHandler(h, route,
		otelhttp.WithTracerProvider(currentProvider{}),
		otelhttp.WithPropagators(traceContext),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()), // the gateway's metrics are Prometheus'
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + route }),
		otelhttp.WithSpanOptions(trace.WithAttributes(attribute.String("http.route", route))),
	)
}

// currentProvider hands out a tracer that starts spans with the tracer
// Setup installed, or no-op spans while tracing is off.
type currentProvider struct{ embedded.TracerProvider }

func (currentProvider) Tracer(string, ...trace.TracerOption) trace.Tracer { return currentTracer{} }

type currentTracer struct{ embedded.Tracer }

func (currentTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if st := cur.Load(); st != nil {
		return st.tracer.Start(ctx, name, opts...)
	}
	return ctx, noop
}
