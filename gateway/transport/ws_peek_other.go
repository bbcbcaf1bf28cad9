//go:build !linux

package transport

import "syscall"

// peerGone is false where connections do not park (no poller): the
// reader finds out.
func peerGone(syscall.Conn) bool { return false }
