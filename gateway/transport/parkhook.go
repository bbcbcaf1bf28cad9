package transport

import "context"

// OnPark registers in a request's context what a middleware that measures
// requests when their handler returns (the access log, the request
// metrics) does when the handler's stream parks instead (see Park): f runs
// in the handler's goroutine as the stream parks, so the handler's return
// no longer ends the request, and returns the function to call once when
// the stream really ends, with the bytes written after the response head
// (nil: nothing to call). That function runs on whichever goroutine ends
// the stream and must not block. Hooks run innermost first.
func OnPark(ctx context.Context, f func() func(written int64)) context.Context {
	prev, _ := ctx.Value(parkHooksKey{}).(*parkHook)
	return context.WithValue(ctx, parkHooksKey{}, &parkHook{f: f, next: prev})
}

type parkHooksKey struct{}

// parkHook is one OnPark registration; next is the one registered before
// it (by an outer middleware).
type parkHook struct {
	f    func() func(int64)
	next *parkHook
}

// runParkHooks tells the hooks of ctx that the stream parked and returns
// what they want called when it ends.
func runParkHooks(ctx context.Context) []func(int64) {
	var ends []func(int64)
	h, _ := ctx.Value(parkHooksKey{}).(*parkHook)
	for ; h != nil; h = h.next {
		if end := h.f(); end != nil {
			ends = append(ends, end)
		}
	}
	return ends
}
