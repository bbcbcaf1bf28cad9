//go:build !linux

package netpoll

import "syscall"

// Poller is not available on this platform; New returns ErrUnsupported.
type Poller struct{}

// Handle is not available on this platform.
type Handle struct{}

// Options configure a Poller (see the Linux implementation).
type Options struct {
	OnFail func(err error)
}

// New returns ErrUnsupported on this platform.
func New(Options) (*Poller, error) { return nil, ErrUnsupported }

// Fail does nothing on this platform.
func (p *Poller) Fail(error) {}

// Add returns ErrUnsupported on this platform.
func (p *Poller) Add(c syscall.Conn, fn func()) (*Handle, error) { return nil, ErrUnsupported }

// Rearm returns ErrUnsupported on this platform.
func (h *Handle) Rearm() error { return ErrUnsupported }

// Remove does nothing on this platform.
func (h *Handle) Remove() error { return nil }

// Close does nothing on this platform.
func (p *Poller) Close() error { return nil }
