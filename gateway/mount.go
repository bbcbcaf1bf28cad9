package gateway

import (
	"context"
	"net/http"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
)

// Mount serves h for every method at pattern (chi syntax), behind the same
// authentication, metrics, access log and panic recovery as the built-in
// routes; unauthenticated requests get dialect d's 401, and request bodies
// must arrive within Config.ReadTimeout (readDeadline). Bindings built on
// the gateway (streaming, subscriptions) are mounted this way by the binary,
// so package gateway never imports them. Call Mount before serving.
func (s *Server) Mount(d aep.Dialect, pattern string, h http.Handler) {
	s.router.With(authenticate(s.auth(), unauthorizedFor(d)), s.readDeadline).Handle(pattern, h)
}

// MountMethod is Mount for one method, for a pattern that other methods of
// the gateway already serve (GET /aep/events beside POST /aep/events).
func (s *Server) MountMethod(d aep.Dialect, method, pattern string, h http.Handler) {
	s.router.With(authenticate(s.auth(), unauthorizedFor(d)), s.readDeadline).Method(method, pattern, h)
}

func unauthorizedFor(d aep.Dialect) func(http.ResponseWriter, *http.Request) {
	if d == aep.DialectD {
		return unauthorizedD
	}
	return unauthorizedR
}

// IngestResult is the outcome of one event given to Ingest.
type IngestResult struct {
	// Err is the event's validation error (its dialect's code and
	// message), or nil.
	Err *aep.Error
	// WriteErr is set when the event was valid but Kafka did not take it
	// (retry with the same id).
	WriteErr error
	// Attrs are the event's routing attributes when it was valid.
	Attrs     aep.Attrs
	Partition int32
	Offset    int64
	// RateLimited is set when the tenant's --rate-limit refused the
	// events; Err then holds the dialect's limit error (retryable) and
	// RetryAfter how long to wait (zero when the batch exceeds the burst
	// and can never be taken whole).
	RateLimited bool
	RetryAfter  time.Duration
}

// Accepted reports whether the event is in the log.
func (r *IngestResult) Accepted() bool { return r.Err == nil && r.WriteErr == nil }

// Ingest validates and writes events of dialect d for tenant, as the HTTP
// ingest endpoints do, for bindings that receive events another way
// (WebSocket emitters). Each event stands alone; results[i] is events[i]'s
// outcome. Oversize events are refused with the dialect's limit error.
//
// The tenant's rate limit applies as on HTTP ingest: over it, every result
// is RateLimited and nothing is written.
func (s *Server) Ingest(ctx context.Context, tenant string, d aep.Dialect, events [][]byte) []IngestResult {
	if res := s.admitEvents(tenant, d, len(events)); res != nil {
		return res
	}
	frames := make([]frame, len(events))
	for i, ev := range events {
		frames[i] = frame{index: i, line: 1, raw: ev, size: len(ev)}
		if len(ev) > s.ingest.limits.MaxEventBytes {
			frames[i] = frame{index: i, line: 1, oversize: true, size: len(ev)}
		}
	}
	outs, _ := s.ingest.validate(d, frames)
	valid := 0
	for i := range outs {
		if outs[i].parseErr == nil {
			valid++
		} else {
			s.metrics.rejected(d, outs[i].parseErr.Kind.String(), 1)
		}
	}
	if valid > 0 {
		_ = s.ingest.write(ctx, tenant, d, outs)
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
