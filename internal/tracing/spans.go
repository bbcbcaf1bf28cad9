package tracing

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/aep-gateway/aep-gateway/internal/jsonscan"
)

// Span attribute keys of the gateway's own spans.
const (
	AttrTenant       = attribute.Key("aep.tenant")
	AttrDialect      = attribute.Key("aep.dialect")
	AttrEventID      = attribute.Key("aep.event.id")
	AttrEventType    = attribute.Key("aep.event.type")
	AttrEvents       = attribute.Key("aep.events")
	AttrStream       = attribute.Key("aep.stream")
	AttrSequence     = attribute.Key("aep.delivery.sequence")
	AttrAttempt      = attribute.Key("aep.delivery.attempt")
	AttrSubscription = attribute.Key("aep.subscription")
	AttrOutcome      = attribute.Key("aep.ack.outcome")
	// The record's partition and offset under the names franz-go's kotel
	// gives them on the Kafka receive span (semantic conventions v1.18),
	// so that one attribute finds a record in every span of its trace.
	AttrPartition = attribute.Key("messaging.kafka.source.partition")
	AttrOffset    = attribute.Key("messaging.kafka.message.offset")
)

// noop is the span every helper hands out while tracing is off.
var noop = trace.SpanFromContext(context.Background())

// StartMessage starts the span of one WebSocket ingest message of n events.
func StartMessage(ctx context.Context, dialect, tenant string, n int) (context.Context, trace.Span) {
	st := cur.Load()
	if st == nil {
		return ctx, noop
	}
	return st.tracer.Start(ctx, "aep.ingest.message", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(AttrDialect.String(dialect), AttrTenant.String(tenant), AttrEvents.Int(n)))
}

// StartEvent starts the ingest span of one valid event, raw its bytes as
// received. Its parent is the event's own traceparent attribute when it
// carries a valid one (dialect R events may): the event's trace is the one
// its emitter started, and the span links to the request's or message's
// span in ctx. Without one, the parent is the span in ctx. The returned
// context (ctx's values, the event span) is the record's context: the Kafka
// publish span is its child.
func StartEvent(ctx context.Context, raw []byte, dialect, tenant, id, typ string) (context.Context, trace.Span) {
	st := cur.Load()
	if st == nil {
		return ctx, noop
	}
	parent := ctx
	var links []trace.Link
	if tp := eventTraceparent(raw); tp != "" {
		if sc := trace.SpanContextFromContext(st.prop.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})); sc.IsValid() {
			if req := trace.SpanContextFromContext(ctx); req.IsValid() {
				links = []trace.Link{{SpanContext: req}}
			}
			parent = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	ctx, span := st.tracer.Start(parent, "aep.ingest.event", trace.WithSpanKind(trace.SpanKindInternal), trace.WithLinks(links...))
	if span.IsRecording() { // attributes only for spans that are kept (sampled)
		span.SetAttributes(AttrDialect.String(dialect), AttrTenant.String(tenant), AttrEventID.String(id), AttrEventType.String(typ))
	}
	return ctx, span
}

// EndError ends span, marking it failed when err is not nil.
func EndError(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// eventTraceparent returns the string value of the top-level traceparent
// member of the JSON object raw, or "". Ingest has validated the event, so
// the value is plain hex and dashes (an escaped one is not parsed and is
// ignored).
func eventTraceparent(raw []byte) string {
	it := jsonscan.Object(raw, jsonscan.SkipSpace(raw, 0))
	for m, ok := it.Next(); ok; m, ok = it.Next() {
		if string(m.RawName(raw)) != "traceparent" {
			continue
		}
		if v := raw[m.Value:m.End]; len(v) >= 2 && v[0] == '"' {
			return string(v[1 : len(v)-1])
		}
		return ""
	}
	return ""
}

// Deliveries are the open delivery spans of one stream: started as the
// binding encodes each delivery, ended when the write that carries them to
// the client returns. The zero value is ready. It belongs to the stream's
// one writer goroutine.
type Deliveries struct {
	spans []trace.Span
}

// Start starts the delivery span of r on a stream (StartDelivery) and
// keeps it until End.
func (d *Deliveries) Start(r *kgo.Record, stream, tenant string, seq uint64, attempt int) {
	if cur.Load() == nil || r == nil || len(d.spans) >= maxOpenDeliveries {
		return
	}
	d.spans = append(d.spans, StartDelivery(r, stream, tenant, seq, attempt))
}

// StartDelivery starts the span of one delivery of r to a stream: the child
// of the record's context (the Kafka receive span, itself the child of the
// context in the record's headers). End it when the write that carries the
// delivery to the client returns (for a queued writer: EndWritten).
func StartDelivery(r *kgo.Record, stream, tenant string, seq uint64, attempt int) trace.Span {
	st := cur.Load()
	if st == nil || r == nil {
		return noop
	}
	_, span := st.tracer.Start(st.recordContext(r), "aep.deliver", trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(AttrStream.String(stream), AttrTenant.String(tenant), AttrSequence.Int64(int64(seq)),
			AttrPartition.Int(int(r.Partition)), AttrOffset.Int64(r.Offset))
		if attempt > 0 {
			span.SetAttributes(AttrAttempt.Int(attempt))
		}
	}
	return span
}

// EndWritten ends meta when it is a span: a queued writer's hook after it
// wrote a message whose bookkeeping is a delivery span (StartDelivery).
func EndWritten(meta any) {
	if s, ok := meta.(trace.Span); ok {
		s.End()
	}
}

// maxOpenDeliveries bounds the spans one stream holds between writes.
const maxOpenDeliveries = 4096

// End ends every open delivery span: the write that carried them
// succeeded when ok.
func (d *Deliveries) End(ok bool) {
	for i, s := range d.spans {
		if !ok {
			s.SetStatus(codes.Error, "stream write failed")
		}
		s.End()
		d.spans[i] = nil
	}
	d.spans = d.spans[:0]
}

// Ack records an acknowledgement (or rejection) of r by a durable
// subscription: a span, child of the record's context, that ends at once.
func Ack(r *kgo.Record, subscription, outcome string) {
	st := cur.Load()
	if st == nil || r == nil {
		return
	}
	ctx := st.recordContext(r)
	_, span := st.tracer.Start(ctx, "aep.ack", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(AttrSubscription.String(subscription), AttrOutcome.String(outcome),
			AttrPartition.Int(int(r.Partition)), AttrOffset.Int64(r.Offset)))
	span.End()
}

// recordContext is the trace context of a fetched record: the Kafka
// receive span kotel left in r.Context, else the context in its headers
// (a client without hooks).
func (st *state) recordContext(r *kgo.Record) context.Context {
	if r.Context != nil && trace.SpanContextFromContext(r.Context).IsValid() {
		return r.Context
	}
	return st.prop.Extract(context.Background(), recordCarrier(r.Headers))
}

// recordCarrier reads trace context from record headers (never written:
// kotel injects on produce).
type recordCarrier []kgo.RecordHeader

func (c recordCarrier) Get(key string) string {
	for _, h := range c {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c recordCarrier) Set(string, string) {}

func (c recordCarrier) Keys() []string {
	out := make([]string, len(c))
	for i, h := range c {
		out[i] = h.Key
	}
	return out
}
