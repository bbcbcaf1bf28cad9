package gateway

import (
	"context"
	"net/http"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/ingest"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/internal/tracing"
)

// Mount serves h for every method at pattern (chi syntax), behind the same
// authentication, metrics, access log and panic recovery as the built-in
// routes; unauthenticated requests get dialect d's 401, and request bodies
// must arrive within Config.ReadTimeout (bodyDeadline). Bindings built on
// the gateway (streaming, subscriptions) are mounted this way by the binary,
// so package gateway never imports them. Call Mount before serving.
func (s *Server) Mount(d aep.Dialect, pattern string, h http.Handler) {
	s.router.With(authenticate(s.auth(), d)).Handle(pattern, h)
}

// MountMethod is Mount for one method, for a pattern that other methods of
// the gateway already serve (GET /aep/events beside POST /aep/events).
func (s *Server) MountMethod(d aep.Dialect, method, pattern string, h http.Handler) {
	s.router.With(authenticate(s.auth(), d)).Method(method, pattern, h)
}

// IngestResult is the outcome of one event given to Ingest.
type IngestResult = ingest.Result

// IngestFunc is Ingest bound to dialect d, for the bindings that take an
// ingest.Func.
func (s *Server) IngestFunc(d aep.Dialect) ingest.Func {
	return func(ctx context.Context, t tenant.Tenant, events [][]byte) []ingest.Result {
		return s.Ingest(ctx, t, d, events)
	}
}

// Ingest validates and writes events of dialect d for tenant, as the HTTP
// ingest endpoints do, for bindings that receive events another way
// (WebSocket emitters). Each event stands alone; results[i] is events[i]'s
// outcome. Oversize events are refused with the dialect's limit error.
//
// The tenant's rate limit applies event by event (a WebSocket's pipe hands
// over the frames read while a write was in flight, each its own event):
// the events the bucket holds tokens for are written, the rest are
// RateLimited. A binding's events are a prefix of what it sent, so the
// refused ones are the last.
func (s *Server) Ingest(ctx context.Context, t tenant.Tenant, d aep.Dialect, events [][]byte) []IngestResult {
	k, refused := s.admitEach(t.String(), d, len(events))
	if k == 0 {
		return refused
	}
	return append(s.ingestAdmitted(ctx, t, d, events[:k]), refused...)
}

// ingestAdmitted is Ingest for events the rate limit let through.
func (s *Server) ingestAdmitted(ctx context.Context, t tenant.Tenant, d aep.Dialect, events [][]byte) []IngestResult {
	tenant := t.String()
	frames := make([]frame, len(events))
	for i, ev := range events {
		frames[i] = frame{index: i, line: 1, raw: ev, size: len(ev)}
		if len(ev) > s.ingest.limits.MaxEventBytes {
			frames[i] = frame{index: i, line: 1, oversize: true, size: len(ev)}
		}
	}
	outs, _ := s.ingest.validate(d, frames, nil)
	checkPublisher(d, t, s.verifyToken(), outs)
	valid := 0
	for i := range outs {
		if outs[i].parseErr == nil {
			valid++
		} else {
			s.metrics.rejected(d, outs[i].parseErr.Kind.String(), 1)
		}
	}
	if valid > 0 {
		mctx, span := tracing.StartMessage(ctx, d.String(), tenant, len(events))
		tracing.EndError(span, s.ingest.write(mctx, tenant, publisherOf(t, viaWS), d, outs, false, nil))
	}
	res := make([]IngestResult, len(outs))
	accepted := 0
	for i := range outs {
		o := &outs[i]
		res[i] = IngestResult{Err: o.parseErr, WriteErr: o.writeErr, Attrs: o.attrs, Partition: o.partition, Offset: o.offset}
		if res[i].Accepted() {
			accepted++
		}
	}
	s.metrics.accepted(d, accepted)
	s.metrics.rejected(d, "kafka", valid-accepted)
	return res
}
