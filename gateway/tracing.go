package gateway

import (
	"context"
	"net/http"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/internal/tracing"
)

// traceIngest gives an ingest request on route (the path template) its
// server span (docs/operations.md, Tracing) through otelhttp, named
// "METHOD route", carrying the tenant; its trace id goes into the access
// line. With tracing off it is the handler itself.
func traceIngest(route string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		traced := tracing.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			span := trace.SpanFromContext(ctx)
			span.SetAttributes(tracing.AttrTenant.String(TenantFrom(ctx)))
			if sc := span.SpanContext(); sc.HasTraceID() {
				noteTrace(ctx, sc.TraceID().String())
			}
			next.ServeHTTP(w, r)
		}), route)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !tracing.On() {
				next.ServeHTTP(w, r)
				return
			}
			traced.ServeHTTP(w, r)
		})
	}
}

// traceEvents starts the ingest span of each record's event (outs[idx[j]]
// is recs[j]'s) and makes it the record's context, so that the Kafka
// publish span is its child and the record's traceparent header names it.
// Nil while tracing is off.
func traceEvents(ctx context.Context, tenant string, d aep.Dialect, recs []*kgo.Record, outs []outcome, idx []int) []trace.Span {
	if !tracing.On() {
		return nil
	}
	spans := make([]trace.Span, len(recs))
	for j, r := range recs {
		o := &outs[idx[j]]
		r.Context, spans[j] = tracing.StartEvent(ctx, o.raw, d.String(), tenant, o.attrs.ID, o.attrs.Type)
	}
	return spans
}

// endEvents ends the spans of traceEvents with their records' outcomes.
func endEvents(spans []trace.Span, errs []error) {
	for j, s := range spans {
		tracing.EndError(s, errs[j])
	}
}
