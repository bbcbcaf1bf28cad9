//go:build linux

package transport

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// peerGone reports, without blocking, whether the peer of a parked
// connection has closed or reset it with nothing left to read: a peek
// that reads end of file or fails (other than "nothing yet"). The poller's
// callback asks it so that a client that left ends its connection without
// a reader goroutine (a disconnect storm starts none).
func peerGone(sc syscall.Conn) bool {
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	_ = rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case err == nil:
			gone = n == 0
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
		default:
			gone = true
		}
	})
	return gone
}
