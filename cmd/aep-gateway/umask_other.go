//go:build !unix

package main

// restrictUmask has no umask to set outside Unix.
func restrictUmask() {}
