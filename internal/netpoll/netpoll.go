package netpoll

import "errors"

var (
	// ErrUnsupported is returned by New where there is no poller (not Linux).
	ErrUnsupported = errors.New("netpoll: unsupported on this platform")
	// ErrClosed is returned by Add and Rearm once the Poller is closed.
	ErrClosed = errors.New("netpoll: poller closed")
	// ErrFailed is returned by Add and Rearm once the Poller's wait failed
	// (see Options.OnFail), wrapped with the cause.
	ErrFailed = errors.New("netpoll: poller failed")
)
