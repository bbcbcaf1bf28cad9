package main

import (
	"bytes"
	"context"
	"testing"
)

func TestRunGenCLI(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"gen", "--dialect", "d", "--events", "3"}, nil, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if n := bytes.Count(out.Bytes(), []byte("\n")); n != 3 {
		t.Fatalf("%d lines, want 3", n)
	}
}
