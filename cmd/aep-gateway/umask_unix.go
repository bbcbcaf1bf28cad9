//go:build unix

package main

import "syscall"

// restrictUmask makes every file and directory the process creates from
// now on private to its user (0600/0700): the embedded broker creates its
// segment files 0644 itself.
func restrictUmask() { syscall.Umask(0o077) }
