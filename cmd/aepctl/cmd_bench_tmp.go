package main

import (
	"context"
	"errors"
	"io"
)

// cmdBenchIdle is being built on this branch.
func cmdBenchIdle(context.Context, []string, io.Writer, io.Writer) error {
	return errors.New("bench idle: not built yet")
}
