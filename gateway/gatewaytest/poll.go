package gatewaytest

import (
	"testing"
	"time"
)

// Wait bounds how long the helpers of this package wait for something that
// should happen: a failure deadline that stops a hung test, never a timing
// assertion.
const Wait = 30 * time.Second

// pollEvery is how often Poll checks its condition.
const pollEvery = 5 * time.Millisecond

// Poll checks cond until it holds, failing tb with "timed out waiting for
// what" after Wait. cond runs on the calling goroutine.
func Poll(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	PollFor(tb, Wait, what, cond)
}

// PollFor is Poll with another deadline.
func PollFor(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	PollEvery(tb, within, pollEvery, what, cond)
}

// PollEvery is PollFor checking cond every interval: benchmarks that wait
// for deliveries poll finely so the wait adds little to what they time.
func PollEvery(tb testing.TB, within, every time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Eventually(within, every, cond) {
		tb.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// Eventually checks cond every interval until it holds (true) or within
// has passed (false), for a caller whose failure message needs what it
// saw last (a response body, a process's logs).
func Eventually(within, every time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(every)
	}
	return true
}
