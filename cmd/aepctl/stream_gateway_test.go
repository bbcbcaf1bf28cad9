package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest/streamtest"
	"github.com/aep-gateway/aep-gateway/internal/cli"
)

// newStreamGateway is a real gateway on kfake with the streaming bindings
// mounted as cmd/aep-gateway/main.go mounts them (streamtest). It sets
// AEPCTL_URL to it and points AEPCTL_CONFIG at a missing file, so the
// user's config plays no part.
func newStreamGateway(t *testing.T) string {
	t.Helper()
	st := streamtest.New(t, gatewaytest.Options{Partitions: 3, Config: func(c *gateway.Config) { c.WriteTimeout = 10 * time.Second }}, nil)
	t.Setenv(cli.EnvURL, st.URL)
	t.Setenv(cli.EnvToken, "")
	t.Setenv(cli.EnvProfile, "")
	t.Setenv(cli.EnvConfig, filepath.Join(t.TempDir(), "no-config"))
	return st.URL
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// bgRun is an aepctl command running in a goroutine.
type bgRun struct {
	t        *testing.T
	out, err syncBuffer
	code     int
	done     chan struct{}
	cancel   context.CancelFunc
}

// startRun runs aepctl args in the background; the test's end cancels and
// joins it.
func startRun(t *testing.T, args ...string) *bgRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &bgRun{t: t, done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(r.done)
		r.code = run(ctx, args, strings.NewReader(""), &r.out, &r.err)
	}()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

// waitStderr waits until stderr holds s.
func (r *bgRun) waitStderr(s string) {
	r.t.Helper()
	if !gatewaytest.Eventually(30*time.Second, 20*time.Millisecond, func() bool {
		if strings.Contains(r.err.String(), s) {
			return true
		}
		select {
		case <-r.done:
			r.t.Fatalf("command ended (exit %d) before %q; stderr:\n%s", r.code, s, r.err.String())
		default:
		}
		return false
	}) {
		r.t.Fatalf("no %q on stderr in 30s:\n%s", s, r.err.String())
	}
}

// wait waits for the command to end and returns its exit code.
func (r *bgRun) wait() int {
	r.t.Helper()
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		r.t.Fatalf("command did not end; stdout:\n%s\nstderr:\n%s", r.out.String(), r.err.String())
	}
	return r.code
}

// runOK runs aepctl args to the end and requires exit 0; it returns stdout.
func runOK(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(context.Background(), args, strings.NewReader(stdin), &out, &errb); code != exitOK {
		t.Fatalf("aepctl %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out.String(), errb.String())
	}
	return out.String()
}
