// Package ingest is the contract between the gateway's ingest (validation
// and the acks=all Kafka write, package gateway) and the bindings that
// receive events another way than POST (WebSocket emitters): a Func to call
// and the Result of each event. It sits below the HTTP server so bindings
// depend on this contract, not on the server.
package ingest

import (
	"context"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// DefaultMaxEventBytes is the default bound of one event the gateway
// ingests, whatever the binding.
const DefaultMaxEventBytes = 512 << 10

// Func validates and writes events of one dialect for tenant t, as the HTTP
// ingest endpoints do; each event stands alone and results[i] is
// events[i]'s outcome (the tenant's rate limit too applies event by event:
// those it refuses are the last ones, RateLimited). It returns after Kafka
// acknowledged (or refused) every valid event. Safe for concurrent use.
type Func func(ctx context.Context, t tenant.Tenant, events [][]byte) []Result

// Result is the outcome of one event given to a Func.
type Result struct {
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
func (r *Result) Accepted() bool { return r.Err == nil && r.WriteErr == nil }
